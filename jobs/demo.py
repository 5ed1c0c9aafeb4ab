"""The main job, end to end: every capability seqlake has, on generated data.

Run it as `seqlake demo` (or `spark-submit jobs/demo.py`). It prints a report and writes it as
`report.json` in the warehouse. The demo owns its tables and recreates them on every run: it purges
them only in a warehouse it created itself (a fresh location, or one an earlier demo marked), and
refuses any other unless `--yes`.
"""

from __future__ import annotations

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.core.output import emit
from seqlake.pipelines.demo.full import check_demo_may_reset, run_demo


@click.command("demo", help=__doc__)
@click.option("--small", is_flag=True, help="A tiny data set, all in-process (no JVM); no late materialization.")
@click.option("--yes", is_flag=True, help="Purge the demo's tables even in a warehouse the demo did not create.")
@common_options
def command(small: bool, yes: bool) -> None:
    config = load_cli_config()
    if not yes:
        check_demo_may_reset(config)
    if small:
        from seqlake.pipelines.demo.small import run_small_demo

        report = run_small_demo(config)
    else:
        report = run_demo(config)
    path = f"{config.warehouse_uri()}/report.json"
    report.write_json(path)

    def text() -> None:
        report.print()
        print(f"\nreport written to {path}")

    emit({**report.to_dict(), "report_path": path}, text)


main = job_main(command)

if __name__ == "__main__":
    script_main("demo")
