"""Keep a warehouse small and current: expiry, orphan removal, detail retention, migrations."""
