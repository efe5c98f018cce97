"""orchestrator.judge.evidence: the store under evidence/<lesson>/<gpu>/, its checks and its atomic replace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import SANITIZER_DATA, SEEDS, named
from orchestrator.judge import evidence as evidence_module
from orchestrator.errors import EvidenceError
from orchestrator.judge.evidence import (
    Evidence,
    EvidenceMeta,
    evidence_dir,
    list_gpus,
    load_evidence,
    read_evidence_file,
    recover_evidence,
    write_evidence,
)
from orchestrator.files import sha256_bytes

LESSON = "day13-shared-memory"
SLUG = "nvidia-h200"
TRANSCRIPT = (SEEDS / "shared_memory.txt").read_text(encoding="utf-8")
RACECHECK_LOG = (SANITIZER_DATA / "syncthreads.racecheck.txt").read_bytes()


def make_meta(lesson: str = LESSON, slug: str = SLUG) -> EvidenceMeta:
    return EvidenceMeta(
        lesson=lesson, date="2026-11-29T14:00:00+00:00", gpu_name="NVIDIA H200", gpu_slug=slug,
        compute_capability="9.0", driver_version="580.159.04", cuda_version="13.0",
        nvcc_version="13.0.88", arch="sm_90", flags=["-std=c++17", "-O3"],
        source_sha256="f" * 64, transcript_sha256="", wall_seconds=0.412, exit_status=0,
        coursectl_version="0.1.0", sanitizer_version="2025.3.1.0")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_round_trip(tmp_path):
    written = write_evidence(tmp_path, make_meta(), TRANSCRIPT, {"racecheck.log": RACECHECK_LOG})
    directory = tmp_path / "evidence" / LESSON / SLUG
    assert written == directory == evidence_dir(tmp_path, LESSON, SLUG)
    assert sorted(p.name for p in directory.iterdir()) == ["meta.json", "racecheck.log", "transcript.txt"]
    assert (directory / "transcript.txt").read_bytes() == TRANSCRIPT.encode()
    assert (directory / "racecheck.log").read_bytes() == RACECHECK_LOG

    expected = make_meta().model_copy(update={
        "transcript_sha256": sha256_bytes(TRANSCRIPT.encode()),
        "files": {"racecheck.log": sha256_bytes(RACECHECK_LOG)}})
    assert json.loads((directory / "meta.json").read_text()) == expected.model_dump(mode="json")

    loaded = load_evidence(tmp_path, LESSON, SLUG)
    assert loaded == Evidence(meta=expected, transcript=TRANSCRIPT, directory=directory, root=tmp_path,
                              checked={"racecheck.log": RACECHECK_LOG})
    assert loaded.extra("racecheck.log") == RACECHECK_LOG.decode()
    (directory / "racecheck.log").write_bytes(b"changed after it was loaded and checked")
    assert loaded.extra("racecheck.log") == RACECHECK_LOG.decode(), "the bytes checked against meta.json"
    assert list_gpus(tmp_path, LESSON) == [SLUG]


def test_nothing_recorded_is_none(tmp_path):
    assert load_evidence(tmp_path, LESSON, SLUG) is None
    assert list_gpus(tmp_path, LESSON) == []


def test_list_gpus_only_counts_folders_with_metadata(tmp_path):
    write_evidence(tmp_path, make_meta(slug="nvidia-h200"), TRANSCRIPT)
    write_evidence(tmp_path, make_meta(slug="tesla-t4"), TRANSCRIPT)
    (tmp_path / "evidence" / LESSON / "empty-gpu").mkdir()
    assert list_gpus(tmp_path, LESSON) == ["nvidia-h200", "tesla-t4"]


def test_rewrite_replaces_the_whole_set(tmp_path):
    write_evidence(tmp_path, make_meta(), TRANSCRIPT, {"racecheck.log": RACECHECK_LOG})
    directory = write_evidence(tmp_path, make_meta(), "second\n")
    assert snapshot(directory).keys() == {"meta.json", "transcript.txt"}
    assert load_evidence(tmp_path, LESSON, SLUG).transcript == "second\n"
    assert sorted(p.name for p in directory.parent.iterdir()) == [SLUG]


def test_hand_edited_transcript_is_refused(tmp_path):
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    transcript = directory / "transcript.txt"
    transcript.write_text(TRANSCRIPT.replace("0.017", "0.016"))
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    named = f"evidence/{LESSON}/{SLUG}/transcript.txt"   # from the course's root
    assert str(caught.value) == (f"{named}: transcript does not match the sha256 in meta.json: "
                                 "it was edited after recording")
    assert (caught.value.path, caught.value.line) == (named, None)
    assert caught.value.hint == "re-record it on the GPU it names with `coursectl record LESSON`"


def test_missing_transcript(tmp_path):
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    (directory / "transcript.txt").unlink()
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == f"{named(directory / 'transcript.txt', tmp_path)}: metadata without its transcript"


def test_missing_metadata(tmp_path):
    """A transcript whose meta.json is gone was taken for no evidence at all (NO_EVIDENCE, exit 0)."""
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    (directory / "meta.json").unlink()
    assert list_gpus(tmp_path, LESSON) == [SLUG]
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == f"{named(directory / 'meta.json', tmp_path)}: transcript without its metadata"


def test_edited_extra_file_is_refused(tmp_path):
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT, {"racecheck.log": RACECHECK_LOG})
    (directory / "racecheck.log").write_bytes(RACECHECK_LOG + b"========= one more line\n")
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == (f"{named(directory / 'racecheck.log', tmp_path)}: racecheck.log is missing or does not "
                                 "match its sha256 in meta.json")


def test_metadata_missing_a_field(tmp_path):
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    meta = json.loads((directory / "meta.json").read_text())
    del meta["gpu_slug"]
    (directory / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == f"{named(directory / 'meta.json', tmp_path)}: corrupt metadata: gpu_slug: Field required"


def test_metadata_with_a_wrong_type(tmp_path):
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    meta = json.loads((directory / "meta.json").read_text())
    meta["wall_seconds"] = "fast"
    (directory / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == (f"{named(directory / 'meta.json', tmp_path)}: corrupt metadata: wall_seconds: "
                                 "Input should be a valid number, unable to parse string as a number")


def test_metadata_that_is_not_json_is_refused(tmp_path):
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    (directory / "meta.json").write_text("{not json")
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert caught.value.path == named(directory / "meta.json", tmp_path)
    assert caught.value.message.startswith("corrupt metadata: ")
    assert "Invalid JSON: key must be a string at line 1 column 2" in caught.value.message


def test_metadata_that_is_not_json_reads_cleanly(tmp_path):
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    (directory / "meta.json").write_text("{not json")
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == (f"{named(directory / 'meta.json', tmp_path)}: corrupt metadata: "
                                 "Invalid JSON: key must be a string at line 1 column 2")


def test_metadata_for_another_lesson(tmp_path):
    write_evidence(tmp_path, make_meta(lesson="day14-syncthreads"), TRANSCRIPT)
    source = tmp_path / "evidence" / "day14-syncthreads" / SLUG
    target = tmp_path / "evidence" / LESSON / SLUG
    target.parent.mkdir(parents=True)
    os.rename(source, target)
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == (f"{named(target / 'meta.json', tmp_path)}: meta.json says lesson 'day14-syncthreads' on "
                                 f"'nvidia-h200' but lies in {LESSON}/{SLUG}")


def test_metadata_for_another_gpu(tmp_path):
    write_evidence(tmp_path, make_meta(slug="tesla-t4"), TRANSCRIPT)
    base = tmp_path / "evidence" / LESSON
    os.rename(base / "tesla-t4", base / SLUG)
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == (f"{named(base / SLUG / 'meta.json', tmp_path)}: meta.json says lesson {LESSON!r} on "
                                 f"'tesla-t4' but lies in {LESSON}/{SLUG}")


# -- interrupted writes ----------------------------------------------------------------
@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_interrupted_write_leaves_the_old_evidence(tmp_path, monkeypatch, fail_at):
    """Ctrl-C while the new set is being staged (transcript, extra file, metadata)."""
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT, {"racecheck.log": RACECHECK_LOG})
    before = snapshot(tmp_path)
    real_write = evidence_module.atomic_write
    calls = []

    def failing_write(path, data):
        calls.append(Path(path).name)
        if len(calls) == fail_at:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(b"half")  # a half-written file the interrupt leaves behind
            raise KeyboardInterrupt
        real_write(path, data)

    monkeypatch.setattr(evidence_module, "atomic_write", failing_write)
    with pytest.raises(KeyboardInterrupt):
        write_evidence(tmp_path, make_meta(), "new transcript\n", {"racecheck.log": b"new log\n"})
    assert calls == ["transcript.txt", "racecheck.log", "meta.json"][:fail_at]
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in directory.parent.iterdir()) == [SLUG]
    assert load_evidence(tmp_path, LESSON, SLUG).transcript == TRANSCRIPT


def test_interrupt_between_the_renames_is_recovered_by_record_alone(tmp_path, monkeypatch):
    """Old set moved aside, new one not yet in place: loading names it and moves nothing; recover_evidence puts it back."""
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT, {"racecheck.log": RACECHECK_LOG})
    before = snapshot(directory)
    real_rename = os.rename
    renames = []

    def failing_rename(source, target):
        renames.append((Path(source).name, Path(target).name))
        if len(renames) == 2:
            raise KeyboardInterrupt
        real_rename(source, target)

    monkeypatch.setattr(evidence_module.os, "rename", failing_rename)
    with pytest.raises(KeyboardInterrupt):
        write_evidence(tmp_path, make_meta(), "new transcript\n")
    monkeypatch.undo()
    assert renames == [(SLUG, f".{SLUG}.old"), (f".{SLUG}.new-{os.getpid()}", SLUG)]
    aside = directory.parent / f".{SLUG}.old"
    assert sorted(p.name for p in directory.parent.iterdir()) == [aside.name]

    assert list_gpus(tmp_path, LESSON) == [SLUG]
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == (f"{named(aside, tmp_path)}: the evidence for {SLUG}, left aside by an interrupted record; "
                                 f"`coursectl record {LESSON}` puts it back")
    assert sorted(p.name for p in directory.parent.iterdir()) == [aside.name]

    assert recover_evidence(tmp_path, LESSON) == [
        f"put back {named(directory, tmp_path)}: an interrupted record had left it aside in .{SLUG}.old"]
    assert snapshot(directory) == before
    assert load_evidence(tmp_path, LESSON, SLUG).transcript == TRANSCRIPT
    assert recover_evidence(tmp_path, LESSON) == []


def test_recover_removes_the_old_set_once_the_new_one_is_in(tmp_path, monkeypatch):
    """Killed after both renames, before the old set was removed: the new set stands, the old one goes."""
    write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    monkeypatch.setattr(evidence_module.shutil, "rmtree", lambda path, ignore_errors=False: None)
    directory = write_evidence(tmp_path, make_meta(), "new transcript\n")
    monkeypatch.undo()
    aside = directory.parent / f".{SLUG}.old"
    assert sorted(p.name for p in directory.parent.iterdir()) == [aside.name, SLUG]
    assert load_evidence(tmp_path, LESSON, SLUG).transcript == "new transcript\n"
    assert list_gpus(tmp_path, LESSON) == [SLUG]
    assert recover_evidence(tmp_path, LESSON) == [
        f"removed {named(aside, tmp_path)}: the evidence {SLUG} had before an interrupted record"]
    assert sorted(p.name for p in directory.parent.iterdir()) == [SLUG]


def test_a_dot_folder_that_is_not_a_set_left_aside_is_left_alone(tmp_path):
    """Only a folder whose metadata names its lesson and GPU is a set write_evidence left aside."""
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    for name in (".evil.old", ".tesla-t4.old"):
        os.mkdir(directory.parent / name)
        (directory.parent / name / "meta.json").write_bytes((directory / "meta.json").read_bytes())
    assert list_gpus(tmp_path, LESSON) == [SLUG]
    assert recover_evidence(tmp_path, LESSON) == []
    assert sorted(p.name for p in directory.parent.iterdir()) == [".evil.old", ".tesla-t4.old", SLUG]


# -- files that are not what evidence holds ------------------------------------------------
def make_folder(path: Path) -> None:
    path.mkdir()


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def link_out(path: Path) -> None:
    outside = path.parent.parent / "outside.log"
    outside.write_bytes(RACECHECK_LOG)
    path.symlink_to(outside)


NOT_A_FILE = [
    (make_folder, "{path}: a folder where a file should be"),
    (make_fifo, "{path}: a named pipe where a file should be"),
    (link_to_dev_zero, "{path}: a link leading out of the evidence folder, to /dev/zero"),
    (link_out, "{path}: a link leading out of the evidence folder, to {folder}/../outside.log"),
]


@pytest.mark.parametrize("make, message", NOT_A_FILE, ids=["folder", "fifo", "dev-zero", "link-out"])
def test_only_a_plain_file_of_the_folder_is_read(tmp_path, make, message):
    folder = tmp_path / "evidence" / SLUG
    folder.mkdir(parents=True)
    path = folder / "memcheck.log"
    make(path)
    with pytest.raises(EvidenceError) as caught:
        read_evidence_file(path)
    assert str(caught.value) == message.format(path=path, folder=folder).replace(f"{SLUG}/../", "")


def test_a_link_inside_the_folder_and_a_missing_file(tmp_path):
    (tmp_path / "racecheck.log").write_bytes(RACECHECK_LOG)
    (tmp_path / "copy.log").symlink_to("racecheck.log")
    assert read_evidence_file(tmp_path / "copy.log") == RACECHECK_LOG
    assert read_evidence_file(tmp_path / "missing.log") is None


def test_a_file_over_the_limit_is_refused(tmp_path):
    path = tmp_path / "memcheck.log"
    path.write_bytes(b"x" * 1025)
    assert read_evidence_file(path, limit=1025) == b"x" * 1025
    with pytest.raises(EvidenceError) as caught:
        read_evidence_file(path, limit=1024)
    assert str(caught.value) == f"{path}: larger than 1,024 bytes, the most an evidence file may hold"
    assert evidence_module.FILE_LIMIT == 64 * 1024 * 1024   # said as "larger than 64 MiB, ..."


@pytest.mark.parametrize("name", ["/dev/zero", "../../../../etc/hostname", "..", "a/b.log", ""])
def test_extra_files_have_plain_names(tmp_path, name):
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    meta = json.loads((directory / "meta.json").read_text())
    meta["files"] = {name: "0" * 64}
    (directory / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(EvidenceError) as caught:
        load_evidence(tmp_path, LESSON, SLUG)
    assert str(caught.value) == (f"{named(directory / 'meta.json', tmp_path)}: corrupt metadata: files: {name!r} is not the plain "
                                 "name of a file in the evidence folder")


def test_a_stale_staging_folder_is_replaced(tmp_path):
    """A staging folder an earlier killed process left (same pid) does not leak into the new set."""
    stale = tmp_path / "evidence" / LESSON / f".{SLUG}.new-{os.getpid()}"
    stale.mkdir(parents=True)
    (stale / "leftover.txt").write_text("from a killed run\n")
    directory = write_evidence(tmp_path, make_meta(), TRANSCRIPT)
    assert snapshot(directory).keys() == {"meta.json", "transcript.txt"}
    assert sorted(p.name for p in directory.parent.iterdir()) == [SLUG]
