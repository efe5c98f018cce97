"""orchestrator.cuda.stamp: a cache entry's build.json keeps ptxas' report and the binary's stat, so that a hit
runs no program and reads the binary again only once it is another file or was written to."""
from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrator.cuda import resources as resources_module, stamp
from orchestrator.cuda.resources import parse_resources
from orchestrator.cuda.stamp import STAMP, new_stamp, stamped_resources, trusted_stamp

DIAGNOSTICS = ("ptxas info    : 0 bytes gmem\n"
               "ptxas info    : Compiling entry function 'transposeTiled' for 'sm_90'\n"
               "ptxas info    : Function properties for transposeTiled\n"
               "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
               "ptxas info    : Used 12 registers, used 1 barriers, 4224 bytes smem, 380 bytes cmem[0]\n")


def entry_with(tmp_path: Path, *, old: bool = False) -> Path:
    """A cache entry holding a binary and its stamp (`old`: as written before resources and the stat were kept)."""
    entry = tmp_path / "sm_90-plain" / "key" / "headers"
    entry.mkdir(parents=True)
    (entry / "replay").write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    text = new_stamp(["nvcc"], DIAGNOSTICS, 1.5, entry / "replay", {}, [], parse_resources(DIAGNOSTICS))
    if old:
        info = json.loads(text)
        del info["resources"], info["binary_stat"]
        text = json.dumps(info, indent=1)
    (entry / STAMP).write_text(text)
    return entry


def no_program(*args, **kwargs):
    raise AssertionError("read again or run")


def test_a_hit_on_an_untouched_binary_reads_it_not_again(tmp_path, monkeypatch):
    entry, expected = entry_with(tmp_path), parse_resources(DIAGNOSTICS)
    monkeypatch.setattr(stamp, "sha256_file", no_program)
    monkeypatch.setattr(resources_module, "demangle_all", no_program)
    info, why = trusted_stamp(entry, "replay")
    assert why is None
    assert stamped_resources(entry, info) == expected
    assert expected["transposeTiled"].smem == 4224


def test_a_binary_rewritten_to_its_size_and_time_is_still_caught(tmp_path):
    entry = entry_with(tmp_path)
    binary = entry / "replay"
    before = os.stat(binary)
    binary.write_bytes(b"\x7fELF" + bytes(reversed(range(256))) * 64)   # the same size, another binary
    os.utime(binary, ns=(before.st_atime_ns, before.st_mtime_ns))       # its modification time put back
    assert os.stat(binary).st_size == before.st_size
    assert trusted_stamp(entry, "replay") == (
        None, f"cache entry {entry} held a binary that no longer matches its stamp; rebuilt")


def test_an_older_stamp_is_given_the_report_and_the_stat_at_its_first_hit(tmp_path, monkeypatch):
    entry = entry_with(tmp_path, old=True)
    info, why = trusted_stamp(entry, "replay")   # the binary hashed, as before
    assert why is None
    assert stamped_resources(entry, info) == parse_resources(DIAGNOSTICS)
    kept = json.loads((entry / STAMP).read_text())
    assert kept["binary_stat"] == stamp.binary_stat(entry / "replay")
    assert kept["resources"]["transposeTiled"]["registers"] == 12
    expected = parse_resources(DIAGNOSTICS)
    monkeypatch.setattr(stamp, "sha256_file", no_program)
    monkeypatch.setattr(resources_module, "demangle_all", no_program)
    again, why = trusted_stamp(entry, "replay")
    assert (why, stamped_resources(entry, again)) == (None, expected)


def test_a_report_in_a_stamp_that_is_not_one_is_read_from_the_diagnostics(tmp_path):
    entry = entry_with(tmp_path)
    info = json.loads((entry / STAMP).read_text())
    info["resources"] = {"transposeTiled": {"registers": "many"}}
    assert stamped_resources(entry, info) == parse_resources(DIAGNOSTICS)
    assert json.loads((entry / STAMP).read_text())["resources"]["transposeTiled"]["registers"] == 12
