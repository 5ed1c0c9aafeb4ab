"""`Lake.sample_batches`: the verified samples a trainer reads as a stream, equal to what the samples
job writes, with a sample whose checksum fails left out, kept with its reason, and counted."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import seqlake
from seqlake.pipelines.tables import load_existing_table
from seqlake.pipelines.training.capture.pointers import Request
from seqlake.pipelines.training.rebuild.stream import QuarantinedSamplesWarning
from tests.cli.test_cli_capture import START, USERS, project


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    folder = project(tmp_path_factory.mktemp("stream"))
    requests = [
        Request(f"q{u}-{h}", u, START + timedelta(hours=6, minutes=h), True, 1, "feed", 6)
        for u in USERS
        for h in (1, 2)
    ]
    with seqlake.open(folder / "seqlake.yaml") as lake:
        lake.write_captures(requests, tenant="ranking")
    return folder


def by_request(table: pa.Table) -> dict[str, dict]:
    return {row["request_id"]: row for row in table.to_pylist()}


def test_the_stream_yields_what_the_samples_job_writes(captured: Path) -> None:
    with seqlake.open(captured / "seqlake.yaml") as lake:
        with lake.sample_batches("ranking", batch_rows=3) as stream:
            batches = list(stream)
        assert all(isinstance(batch, pa.RecordBatch) for batch in batches)
        streamed = pa.Table.from_batches(batches)
        assert (stream.requests, stream.samples, stream.quarantined.num_rows) == (2 * len(USERS), 2 * len(USERS), 0)
        written = lake.samples("ranking", compare=False)  # captures written by a user keep no fat rows
        assert (written.samples, written.quarantined) == (2 * len(USERS), 0)
        table = lake.table("samples_ranking")
        assert by_request(streamed) == by_request(table.select(streamed.schema.names))
        assert any(len(row["seq_item_id"]) > 1 for row in streamed.to_pylist())

        # The same batches as NumPy, one array per column, a list column one array per sample.
        with lake.sample_batches("ranking") as stream:
            arrays = list(stream.numpy_batches())
        ids = [request for batch in arrays for request in batch["request_id"].tolist()]
        assert sorted(ids) == sorted(streamed["request_id"].to_pylist())
        first = arrays[0]
        row = by_request(streamed)[first["request_id"][0]]
        assert first["seq_item_id"][0].tolist() == row["seq_item_id"]


def test_a_sample_whose_checksum_fails_is_left_out_kept_and_counted(captured: Path) -> None:
    with seqlake.open(captured / "seqlake.yaml") as lake:
        table = load_existing_table(lake.config, "training_ranking")
        training = table.scan().to_arrow()
        # One pointer's recorded checksum no longer matches the history it points to.
        wrong = pc.equal(training["request_id"], f"q{USERS[0]}-1")
        checksums = pc.if_else(wrong, pa.scalar(b"\x00" * 16, pa.binary()), training["checksum"])
        column = training.schema.get_field_index("checksum")
        changed = training.set_column(column, training.schema.field(column), checksums)
        table.overwrite(changed)
        failed_checksum = pytest.warns(QuarantinedSamplesWarning, match=r"1 of \d+ samples failed their checksum")
        with failed_checksum, lake.sample_batches("ranking") as stream:
            streamed = pa.Table.from_batches(list(stream), stream.schema)
        assert f"q{USERS[0]}-1" not in streamed["request_id"].to_pylist()
        assert streamed.num_rows == 2 * len(USERS) - 1
        [failed] = stream.quarantined.to_pylist()
        assert (failed["request_id"], failed["reason"]) == (f"q{USERS[0]}-1", "checksum mismatch")
