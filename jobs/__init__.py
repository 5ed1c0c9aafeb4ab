"""The commands: one click command per job (`seqlake COMMAND`, or `spark-submit jobs/NAME.py`) that
reads its options, loads the configuration, calls the pipelines and prints the result (text or JSON)."""
