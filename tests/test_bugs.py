"""The planted bugs: in CI each builds; on a GPU each makes verify fail as its fixture says."""

from __future__ import annotations

import pytest

from bugs import ROOT, load_mutations, make_bug_course
from conftest import build_in_background
from orchestrator.manifest.load import load_manifest
from orchestrator.workflows.pipeline import verify
from orchestrator.judge.results import Options, Status
from orchestrator.cuda.toolchain import discover

MUTATIONS = load_mutations()
IDS = [f"{m['lesson']}:{m['name']}" for m in MUTATIONS]


def test_every_planted_bug_is_of_a_lesson_of_the_course():
    """The planted bugs are the course's: each names a lesson of lessons.yaml (a lesson without one is the
    author's choice, docs/authoring.md, 'A planted bug'); that each applies once, the slow test shows."""
    manifest = load_manifest(ROOT / "lessons.yaml")
    planted = {m["lesson"] for m in MUTATIONS}
    unknown = sorted(planted - {lesson.id for lesson in manifest.lessons})
    assert not unknown, (f"tests/fixtures/bugs plants bugs in {', '.join(unknown)}, which lessons.yaml does "
                         "not list: rename or remove them with the lesson")


for _id, _entry in zip(IDS, MUTATIONS):   # built while other tests run: see conftest
    build_in_background(f"bug {_id}", f"bug-{_id.replace(':', '-')}",
                        lambda folder, entry=_entry: make_bug_course(entry, folder), _entry["lesson"], "mutants")


@pytest.fixture(scope="module")
def mutants(built_in_background) -> dict[str, tuple]:
    """Every bug course with its lesson built for sm_90: id -> (manifest, build)."""
    return {bug_id: (load_manifest(built_in_background.manifests[f"bug {bug_id}"]),
                     built_in_background[f"bug {bug_id}"]) for bug_id in IDS}


@pytest.mark.slow
@pytest.mark.parametrize("entry", MUTATIONS, ids=IDS)
def test_mutation_applies_once_and_builds(entry, mutants):
    manifest, result = mutants[f"{entry['lesson']}:{entry['name']}"]
    [lesson] = manifest.lessons
    original = (ROOT / lesson.source).read_text()
    mutated = manifest.source_path(lesson).read_text()
    assert mutated != original
    assert mutated == original.replace(entry["old"], entry["new"])
    assert result.binary.is_file() and not result.cached


@pytest.mark.gpu
@pytest.mark.parametrize("entry", [m for m in MUTATIONS if "verify" in m],
                         ids=[i for i, m in zip(IDS, MUTATIONS) if "verify" in m])
def test_planted_bug_fails_verify_on_the_gpu(entry, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "cache"))
    manifest = load_manifest(make_bug_course(entry, tmp_path / "course"))
    tc = discover()
    options = Options(jobs=2)
    [result] = verify(manifest, manifest.lessons, tc, options)
    report = "\n".join(result.reasons)
    print(f"{entry['lesson']}:{entry['name']}: {result.status.value}\n{report}")
    assert result.status in (Status.FAIL, Status.CRASH)
    for text in entry["verify"]["mentions"]:
        assert text in report
