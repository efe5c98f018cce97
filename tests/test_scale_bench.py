"""bench/scale.py: the generated course (distinct sources, or copies with their evidence re-keyed) and the
floor read from a trace."""
from __future__ import annotations

import sys

from conftest import COURSE, ROOT

sys.path.insert(0, str(ROOT / "bench"))
import scale  # noqa: E402  (bench/scale.py)


def test_each_copy_has_a_source_of_its_own_and_no_evidence(tmp_path):
    ids = scale.write_course(tmp_path, 8, source=COURSE)
    assert len(ids) == len(set(ids)) == 8
    sources = [next((tmp_path / "lessons" / i).glob("*.cu")).read_text() for i in ids]
    assert len(set(sources)) == 8
    assert not (tmp_path / "evidence").exists()
    text = (tmp_path / "lessons.yaml").read_text()
    assert all(f"- {i}:" in text for i in ids)


def test_copies_of_the_same_source_carry_their_evidence_rekeyed(tmp_path):
    lessons = len(list(scale.ENTRY.finditer((COURSE / "lessons.yaml").read_text())))
    ids = scale.write_course(tmp_path, lessons + 1, distinct=False, source=COURSE)
    first, fifth = (tmp_path / "lessons" / ids[0]), (tmp_path / "lessons" / ids[lessons])
    assert next(first.glob("*.cu")).read_text() == next(fifth.glob("*.cu")).read_text()
    original = next(m.group(1) for m in scale.ENTRY.finditer((COURSE / "lessons.yaml").read_text()))
    metas = list((tmp_path / "evidence" / ids[lessons]).rglob("meta.json"))
    assert metas
    for meta in metas:
        text = meta.read_text()
        assert f'"lesson": "{ids[lessons]}"' in text and original not in text


def _event(name, start, end, gpu=0):
    return {"name": name, "ph": "X", "ts": start * 1e6, "dur": (end - start) * 1e6, "args": {"gpu": gpu}}


def test_the_floor_is_the_runs_then_the_passes_at_their_concurrency():
    trace = {"traceEvents": [_event("timed runs", 0, 10), _event("timed runs", 10, 20),
                             _event("memcheck", 20, 26), _event("memcheck", 20, 24), _event("racecheck", 24, 30),
                             {"name": "nvcc x", "ph": "X", "ts": 0, "dur": 1, "args": {}}]}
    summary = scale.summarise(trace)
    assert summary == {"timed_runs": 2, "timed_runs_s": 20.0, "passes": 3, "passes_summed_s": 16.0,
                       "longest_pass_s": 6.0, "passes_at_once": 2, "passes_span_s": 10.0, "builds": 1}
    floor = scale.floor({"wall_s": 33.0, "trace": summary})
    assert floor["floor_s"] == 28.0 and floor["concurrency"] == 2   # 20 + max(16 / 2, 6)
    assert floor["ratio_cold_to_floor"] == round(33 / 28, 3)
