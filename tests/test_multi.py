"""Lessons of more than one file, end to end on tests/data/multi: two cuda-samples-style programs in
one folder sharing common/check.cuh, built with -Icommon (real nvcc builds), one reading a file named
relative to its folder, one with a licence notice of its own and its page in another folder.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from conftest import after, coursectl, lines, statuses
from godbolt_decoder import decode_godbolt
from orchestrator.cuda.build import build_lesson
from orchestrator.judge.evidence import lesson_digest
from orchestrator.cuda.includes import local_headers
from orchestrator.render.course import render_all, write_pages

LINK = re.compile(r"!?\[[^\]]*\]\((?P<inline>[^)\s]+)[^)]*\)|^\[[^\]]+\]:\s*(?P<reference>\S+)", re.MULTILINE)
FENCE = re.compile(r"^(```+|~~~+)[^\n]*\n.*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)


def relative_links(markdown: str) -> list[str]:
    """Every link of a page that names a file or folder (not a URL, not an anchor), outside code blocks."""
    text = FENCE.sub("", markdown)
    text = re.sub(r"`[^`\n]*`", "", text.replace("[`", "[").replace("`]", "]"))
    found = [m["inline"] or m["reference"] for m in LINK.finditer(text)]
    return [link for link in found if not re.match(r"^[a-z]+:|^#", link)]


def rendered(course) -> dict[str, str]:
    pages = render_all(course.load())
    write_pages(pages)
    return {page.name: page.new for page in pages}


def test_each_page_lies_beside_its_source_unless_the_manifest_says_otherwise(multi_course):
    assert list(rendered(multi_course)) == ["lessons/saxpy/README.md", "lessons/ext/saxpy.cu",
                                            "lessons/ext/README.md", "lessons/ext/sum.cu", "README.md"]


def test_every_relative_link_of_the_rendered_pages_resolves(multi_course):
    pages = rendered(multi_course)
    checked = []
    for name, text in pages.items():
        if not name.endswith(".md"):
            continue
        for link in relative_links(text):
            target = (multi_course.root / name).parent / link.partition("#")[0]
            assert target.exists(), f"{name}: {link} leads nowhere"
            checked.append((name, link))
    assert ("lessons/saxpy/README.md", "../ext/saxpy.cu#L24-L29") in checked        # a snippet's lines
    assert ("lessons/saxpy/README.md", "../ext/common/check.cuh") in checked       # a link in the prose, moved
    assert ("lessons/saxpy/README.md", "../ext/") in checked                        # where to type the commands
    assert ("lessons/saxpy/README.md", "../ext/README.md") in checked               # the next day
    assert ("lessons/ext/README.md", "../saxpy/README.md") in checked               # the day before
    assert ("README.md", "lessons/saxpy/README.md") in checked


@pytest.mark.slow
def test_the_build_and_run_commands_work_where_the_page_says_to_type_them(multi_course, tmp_path):
    pages = rendered(multi_course)
    for name, program in (("lessons/saxpy/README.md", "saxpy"), ("lessons/ext/README.md", "sum")):
        page = pages[name]
        folder = re.search(r"^In \[`[^`]+`\]\(([^)]+)\), the folder of", page, re.MULTILINE)
        here = (multi_course.root / name).parent / (folder[1] if folder else "")
        assert bool(folder) == (program == "saxpy"), "only the page away from its source names its folder"
        build, run = re.search(r"```sh\n(nvcc [^\n]+)\n(\./[^\n]+)\n```", page).groups()
        assert build == f"nvcc -std=c++17 -O3 -Icommon -arch=sm_90 -o {program} {program}.cu"
        subprocess.run(shlex.split(build), cwd=here, check=True, timeout=300, capture_output=True)
        ran = subprocess.run(shlex.split(run), cwd=here, check=True, timeout=30, capture_output=True, text=True)
        assert ran.stdout.endswith("built with check.cuh version 1\n")
        (here / program).unlink()


def test_two_pages_at_one_path_are_refused_naming_both_lessons(multi_course, monkeypatch):
    data = yaml.safe_load(multi_course.manifest.read_text())
    del data["lessons"][0]["page"]    # both programs' pages would now be lessons/ext/README.md
    multi_course.manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.chdir(multi_course.root)
    before = {p: p.read_bytes() for p in multi_course.root.rglob("*") if p.is_file()}
    result = coursectl("render", "--check")
    line = next(n for n, text in enumerate(multi_course.manifest.read_text().splitlines(), 1) if "day02-sum" in text)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"coursectl: error: lessons.yaml:{line}: lesson 'day02-sum': its page, beside its source, would be "
        "lessons/ext/README.md, the page of lesson 'day01-saxpy' too\n"
        "hint: give one of them its own page: page: {path: lessons/ext/sum.md}\n")
    assert coursectl("render").exit_code == 2
    assert {p: p.read_bytes() for p in multi_course.root.rglob("*") if p.is_file()} == before


def test_the_compiler_explorer_link_carries_every_local_file_the_source_includes(multi_course):
    pages = rendered(multi_course)
    page = pages["lessons/saxpy/README.md"]
    assert ("[Open in Compiler Explorer][compiler-explorer] (the whole of `saxpy.cu` and `common/check.cuh`, "
            "nvcc 13.0, `-std=c++17 -O3 -Icommon -arch=sm_90`)") in page
    url = page.splitlines()[-1].removeprefix("[compiler-explorer]: ")
    tree, editor, compiler = decode_godbolt(url)["content"][0]["content"]
    files = {f["filename"]: f["content"] for f in tree["componentState"]["files"]}
    source = pages["lessons/ext/saxpy.cu"]
    without_verified = "".join(line for line in source.splitlines(keepends=True) if not line.startswith("// Verified"))
    assert files == {"example.cu": without_verified,
                     "common/check.cuh": (multi_course.root / "lessons/ext/common/check.cuh").read_text()}
    assert editor["componentState"]["source"] == without_verified
    assert compiler["componentState"] == {"tree": 1, "lang": "cuda", "compiler": "nvcc130",
                                          "options": "-std=c++17 -O3 -Icommon -arch=sm_90"}


@pytest.mark.slow
def test_the_headers_a_page_finds_are_those_nvcc_reads(multi_course, nvcc_version):
    """render scans the #include lines (it builds nothing); the build takes nvcc's list: the two agree."""
    manifest = multi_course.load()
    for lesson in manifest.lessons:
        source = manifest.source_path(lesson)
        built = build_lesson(manifest, lesson, "sm_90", shutil.which("nvcc"), nvcc_version)
        scanned = [source, *local_headers(source, manifest.flags(lesson), manifest.root)]
        assert [p.relative_to(manifest.root).as_posix() for p in scanned] == list(built.sources)


def test_a_header_outside_the_sources_folder_leaves_the_link_out_with_a_note(multi_course):
    """Compiler Explorer writes extra files below the main one's folder, never above it."""
    shared = multi_course.root / "lessons" / "shared"
    shared.mkdir()
    (multi_course.root / "lessons/ext/common/check.cuh").rename(shared / "check.cuh")
    multi_course.manifest.write_text(multi_course.manifest.read_text().replace("-Icommon", "-I../shared"))
    pages = rendered(multi_course)
    page = pages["lessons/saxpy/README.md"]
    assert ("No Compiler Explorer link: `saxpy.cu` includes `lessons/shared/check.cuh`, outside its own folder, "
            "and Compiler Explorer holds only files that lie beside the source or below it.") in page
    assert "compiler-explorer" not in page and "godbolt" not in page
    assert page.endswith("· Next: [Day 2: A sum read from a file named relative to the program's folder]"
                         "(../ext/README.md)\n")
    assert "lessons/shared/check.cuh" in page.splitlines()[0]   # the banner names it among the page's inputs


# -- the evidence: every local file's digest -----------------------------------------------------------
CHECK = "lessons/ext/common/check.cuh"


def record_multi(course, monkeypatch) -> dict:
    monkeypatch.chdir(course.root)
    recorded = coursectl("record", "--all", "-q")
    assert (recorded.exit_code, recorded.stderr) == (0, ""), recorded.stdout
    assert statuses(recorded.stdout, "record") == {"day01-saxpy": "PASS (recorded)", "day02-sum": "PASS (recorded)"}
    return json.loads((course.evidence("day02-sum") / "meta.json").read_text())


def edit_check(course) -> None:
    """The header edit of the verify --offline tests: one edit, so that what it makes is built once a run."""
    check = course.root / CHECK
    check.write_text(check.read_text() + "// edited\n")


@pytest.mark.slow
def test_record_keeps_the_digest_of_every_local_file_the_build_read(multi_course, fake_gpu, monkeypatch):
    meta = record_multi(multi_course, monkeypatch)
    source = multi_course.root / "lessons/ext/sum.cu"
    assert meta["source_sha256"] == lesson_digest(source)        # as it always meant: the source alone
    assert meta["sources"] == {"lessons/ext/sum.cu": lesson_digest(source),
                               CHECK: hashlib.sha256((multi_course.root / CHECK).read_bytes()).hexdigest()}
    transcript = (multi_course.evidence("day02-sum") / "transcript.txt").read_text()
    assert transcript == "sum of 5 numbers from data/numbers.txt = 15\nbuilt with check.cuh version 1\n"


@pytest.mark.slow
def test_verify_offline_names_the_header_that_changed_since_the_evidence(multi_course, fake_gpu, monkeypatch):
    record_multi(multi_course, monkeypatch)
    edit_check(multi_course)
    result = coursectl("verify", "--offline", "--all", "-q")
    assert result.exit_code == 0
    assert statuses(result.stdout, "verify --offline") == {"day01-saxpy": "STALE", "day02-sum": "STALE"}
    assert coursectl("verify", "--offline", "--all", "-q", "--strict").exit_code == 1
    # Each line names its own evidence's date: the two records may fall in different seconds.
    dates = {lesson: json.loads((multi_course.evidence(lesson) / "meta.json").read_text())["date"]
             for lesson in ("day01-saxpy", "day02-sum")}
    lines = after(result.stdout, "verify --offline")
    assert [line for line in lines if not line.endswith("; rebuilt")] == [
        f"{lesson}: stale: nvidia-h200: {CHECK} changed since the evidence ({date}); not judged offline: run "
        f"`coursectl record {lesson}` on a GPU" for lesson, date in dates.items()]
    # and the build it took again says why, naming the header
    assert all(f"{CHECK} changed since the" in line for line in lines if line.endswith("; rebuilt")), lines


@pytest.mark.slow
def test_evidence_recorded_before_per_file_digests_is_judged_by_its_source_alone(multi_course, fake_gpu,
                                                                                monkeypatch):
    record_multi(multi_course, monkeypatch)
    for lesson in ("day01-saxpy", "day02-sum"):   # as an older coursectl wrote it: no "sources"
        path = multi_course.evidence(lesson) / "meta.json"
        meta = json.loads(path.read_text())
        del meta["sources"]
        path.write_text(json.dumps(meta, indent=2))
    edit_check(multi_course)
    result = coursectl("verify", "--offline", "--all", "-q")
    assert (result.exit_code, after(result.stdout, "verify --offline")) == (0, [])   # the blind spot it had
    source = multi_course.root / "lessons/ext/sum.cu"
    source.write_text(source.read_text().replace("int main(", "// edited\nint main("))
    result = coursectl("verify", "--offline", "--all", "-q")
    date = json.loads((multi_course.evidence("day02-sum") / "meta.json").read_text())["date"]
    lines = after(result.stdout, "verify --offline")
    assert [line for line in lines if not line.endswith("; rebuilt")] == [
        f"day02-sum: stale: nvidia-h200: the source changed since the evidence ({date}); not judged offline: run "
        "`coursectl record day02-sum` on a GPU"]
    assert all(line.startswith("day02-sum: note: lessons/ext/sum.cu changed since the")
               for line in lines if line.endswith("; rebuilt")), lines


# -- a program the course takes as it is ------------------------------------------------------------
def test_the_licence_notice_stays_first_and_untouched(multi_course):
    original = (multi_course.root / "lessons/ext/saxpy.cu").read_text()
    notice = original[:original.index("*/\n") + 3]
    rendered_source = rendered(multi_course)["lessons/ext/saxpy.cu"]
    assert rendered_source.startswith(notice)
    assert "// Build: nvcc -std=c++17 -O3 -Icommon -arch=sm_90 -o saxpy saxpy.cu\n" in rendered_source[len(notice):]
    assert (multi_course.root / "lessons/ext/saxpy.cu").read_text() == rendered_source


def test_a_program_the_course_must_not_edit_keeps_every_byte(multi_course, monkeypatch):
    multi_course.manifest.write_text(multi_course.manifest.read_text().replace(
        "    source: lessons/ext/saxpy.cu\n", "    source: lessons/ext/saxpy.cu\n    source_header: false\n"))
    source = multi_course.root / "lessons/ext/saxpy.cu"
    before = source.read_bytes()
    monkeypatch.chdir(multi_course.root)
    assert coursectl("render").exit_code == 0
    assert source.read_bytes() == before
    result = coursectl("render", "--check")
    assert (result.exit_code, result.stdout) == (0, "every page is up to date\n")


@pytest.mark.slow
def test_a_sanitizer_pass_of_the_fixture_that_times_out_is_timeout(multi_course, fake_sanitizer, monkeypatch):
    multi_course.manifest.write_text(multi_course.manifest.read_text().replace(
        "sanitizers: {}", "sanitizers: {racecheck: {timeout: 0.5}}"))
    monkeypatch.setenv("FAKE_SANITIZER_RACECHECK_SLEEP", "30")
    monkeypatch.chdir(multi_course.root)
    result = coursectl("verify", "day02-sum", "-q")
    assert result.exit_code == 1
    assert statuses(result.stdout) == {"day02-sum": "TIMEOUT"}
    [reason] = after(result.stdout, "verify")
    assert re.fullmatch(r"day02-sum: racecheck: timed out: killed after 0\.\d s \(timeout 0\.5 s\) "
                        r"with its process group; bound it in lessons.yaml under sanitizers.racecheck: "
                        r"args: \[--launch-count, N\] .*program_args.*", reason), reason


@pytest.mark.slow
def test_editing_a_header_rebuilds_and_verify_names_it_as_a_provenance_change(multi_course, fake_gpu, monkeypatch):
    """The issue's first complaint: after a header edit, build said "cached" and verify ran the old binary."""
    record_multi(multi_course, monkeypatch)
    check = multi_course.root / CHECK
    check.write_text(check.read_text().replace("#define CHECK_VERSION 1", "#define CHECK_VERSION 2"))

    built = coursectl("build", "day02-sum", "--arch", "sm_90")
    assert built.exit_code == 0
    assert re.fullmatch(r"day02-sum \(sm_90\): built in \d+\.\d s: \S+/sum\n", built.stdout), built.stdout
    assert built.stderr == f"day02-sum (sm_90): {CHECK} changed since the cached build; rebuilt\n"

    result = coursectl("verify", "--all", "--json", "report.json")
    assert result.exit_code == 1   # the rebuilt programs print the new version: an exact field moved
    out = lines(result.stdout)
    for lesson in ("day01-saxpy", "day02-sum"):
        assert f"{lesson}: {CHECK} changed since the evidence" in out
    assert "  version [exact]: moved: evidence 1, now 2" in "\n".join(out)
    [_, summed] = json.loads((multi_course.root / "report.json").read_text())["results"]
    assert summed["provenance"] == [{"what": CHECK, "old": meta_sources(multi_course)[CHECK],
                                     "new": hashlib.sha256(check.read_bytes()).hexdigest()}]


def meta_sources(course, lesson: str = "day02-sum") -> dict:
    return json.loads((course.evidence(lesson) / "meta.json").read_text())["sources"]


@pytest.mark.slow
def test_an_unchanged_course_has_no_provenance_change(multi_course, fake_gpu, monkeypatch):
    record_multi(multi_course, monkeypatch)
    result = coursectl("verify", "--all", "--json", "report.json")
    assert result.exit_code == 0
    assert [r["provenance"] for r in json.loads((multi_course.root / "report.json").read_text())["results"]] == [[], []]
