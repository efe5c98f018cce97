"""The `floats` field type: a line of numbers, however many, read as a list that claims index, zip and compare."""

from __future__ import annotations

import re

from orchestrator.judge.comparison import within
from orchestrator.transcript.fields import Compare, FieldSpec

from conftest import coursectl

SCAN = """\
version: 1
lessons:
  - day01-scan: Scan
    output:
      - line: "scan: {y:floats}"
        fields: {y: {compare: tolerance, rel: 0.01}}
    claims:
      - scan-rises: the scan rises
        gate: all(b >= a for a, b in zip(y, y[1:])) and len(y) == 8 and y[0] == 1
"""


def test_floats_reads_a_line_of_numbers_of_any_length():
    spec = FieldSpec(type="floats")
    assert re.fullmatch(spec.value_regex(), "1 2.5, -3e2\t4") is not None
    assert spec.convert("1 2.5, -3e2\t4") == [1.0, 2.5, -300.0, 4.0]
    assert spec.convert("7") == [7.0]
    assert re.fullmatch(spec.value_regex(), "1 2 x") is None


def test_a_floats_tolerance_is_element_by_element_and_keeps_the_count():
    spec = FieldSpec(type="floats", compare=Compare.tolerance, rel=0.1)
    assert within(spec, [1.0, 10.0], [1.05, 10.9])
    assert not within(spec, [1.0, 10.0], [1.05, 12.0])
    assert not within(spec, [1.0, 10.0], [1.0, 10.0, 3.0])


def test_claims_index_zip_and_compare_a_floats_field(tmp_path):
    (tmp_path / "lessons/day01-scan").mkdir(parents=True)
    (tmp_path / "lessons/day01-scan/scan.cu").write_text("int main() {}\n", encoding="utf-8")
    (tmp_path / "lessons.yaml").write_text(SCAN, encoding="utf-8")
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("scan: 1 2 3.5 4, 5 6e0 7 8\n", encoding="utf-8")
    bad.write_text("scan: 1 2 3.5 4 5 6 7 1\n", encoding="utf-8")
    manifest = tmp_path / "lessons.yaml"
    held = coursectl("check", "day01-scan", good, "--manifest", manifest)
    assert held.exit_code == 0 and "y = [1.0, 2.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0]" in held.output
    failed = coursectl("check", "day01-scan", bad, "--manifest", manifest)
    assert failed.exit_code == 1 and "first a, b to break it: (7.0, 1.0)" in failed.output
