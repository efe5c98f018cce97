"""Programs of several files (`sources:`): built unit by unit and linked, every file an input of the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import coursectl, edit_lessons, fixture_course

from orchestrator.cuda.build import build_lesson
from orchestrator.cuda.buildkey import flag_files
from orchestrator.errors import BuildError, ManifestError
from orchestrator.manifest.load import load_manifest

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "sources"
NVCC = shutil.which("nvcc")


@pytest.fixture
def course(tmp_path, monkeypatch) -> Path:
    """A copy of the fixture course, with a build cache of its own."""
    return fixture_course(FIXTURE, tmp_path, monkeypatch)


def test_sources_loads_and_names_every_unit(course):
    manifest = load_manifest(course / "lessons.yaml")
    lesson = manifest.lesson("day01-split")
    assert lesson.source == Path("lessons/day01-split/main.cu")
    assert lesson.source_files == [Path("lessons/day01-split/main.cu"), Path("lessons/day01-split/scale.cu")]
    assert lesson.binary_name == "main"


@pytest.mark.parametrize("sources, words", [
    ([], "an empty list"),
    (["lessons/day01-split/main.cu", "lessons/day01-split/scale.cuh"], "is no translation unit"),
    (["lessons/day01-split/main.cu", "lessons/day01-split/main.cu"], "is listed twice"),
    (["lessons/day01-split/main.cu", "lessons/day01-split/gone.cu"], "does not exist"),
])
def test_bad_sources_are_named(course, sources, words):
    edit_lessons(course, lambda data: data["lessons"][0].update(sources=sources))
    with pytest.raises(ManifestError) as caught:
        load_manifest(course / "lessons.yaml")
    assert words in str(caught.value)
    assert "lessons.yaml:" in str(caught.value)


def test_source_and_sources_together_are_refused(course):
    edit_lessons(course, lambda data: data["lessons"][0].update(source="lessons/day01-split/main.cu"))
    with pytest.raises(ManifestError) as caught:
        load_manifest(course / "lessons.yaml")
    assert "not both" in str(caught.value)


def test_flag_files_are_inputs(tmp_path):
    (tmp_path / "opts.txt").write_text("-O3\n")
    (tmp_path / "link.ld").write_text("/* script */\n")
    named = flag_files(["--options-file", "opts.txt", "-Xlinker=-Tlink.ld", "-O3", "-I."], tmp_path, tmp_path)
    assert sorted(named) == ["link.ld", "opts.txt"]
    outside = tmp_path / "course"
    outside.mkdir()
    assert flag_files(["--options-file", "../opts.txt"], outside, outside) == {}


def _build(root: Path, lesson_id: str, nvcc_version: str):
    manifest = load_manifest(root / "lessons.yaml")
    return build_lesson(manifest, manifest.lesson(lesson_id), "sm_90", NVCC, nvcc_version)


@pytest.mark.slow
@pytest.mark.parametrize("lesson_id, edited", [
    ("day01-split", "lessons/day01-split/main.cu"),
    ("day01-split", "lessons/day01-split/scale.cu"),
    ("day01-split", "lessons/day01-split/scale.cuh"),
    ("day02-mixed", "lessons/day02-mixed/reference.cpp"),
    ("day02-mixed", "lessons/day02-mixed/reference.h"),
    ("day02-mixed", "common/check.cuh"),
])
def test_an_edit_of_any_file_rebuilds_and_names_it(course, nvcc_version, lesson_id, edited):
    first = _build(course, lesson_id, nvcc_version)
    assert not first.cached
    assert edited in first.sources
    assert list(first.sources)[:2] == [unit.as_posix() for unit in
                                       load_manifest(course / "lessons.yaml").lesson(lesson_id).source_files]
    assert first.resources, "ptxas' report of the kernels of every unit"
    assert _build(course, lesson_id, nvcc_version).cached
    with open(course / edited, "a") as file:
        file.write("// edited\n")
    again = _build(course, lesson_id, nvcc_version)
    assert not again.cached
    assert any(edited in note for note in again.notes), again.notes
    assert again.sources[edited] != first.sources[edited]


@pytest.mark.slow
def test_relocatable_device_code_when_the_flags_ask(course, nvcc_version):
    edit_lessons(course, lambda data: data["lessons"][0].update(flags=["-std=c++17", "-O3", "-I../../common", "-rdc=true"]))
    built = _build(course, "day01-split", nvcc_version)
    assert built.binary.is_file()   # ptxas reports no resources of relocatable code: its allocation is the link's
    assert "-rdc=true" in built.command


@pytest.mark.slow
def test_a_file_named_by_a_flag_is_an_input(course, nvcc_version):
    prelude = course / "lessons" / "day01-split" / "prelude.cuh"
    prelude.write_text("#define FACTOR 3\n")
    edit_lessons(course, lambda data: data["lessons"][0].update(
        flags=["-std=c++17", "-O3", "-I../../common", "-include", "prelude.cuh"]))
    first = _build(course, "day01-split", nvcc_version)
    assert "lessons/day01-split/prelude.cuh" in first.sources
    prelude.write_text("#define FACTOR 4\n")
    again = _build(course, "day01-split", nvcc_version)
    assert not again.cached
    assert any("lessons/day01-split/prelude.cuh changed" in note for note in again.notes), again.notes


@pytest.mark.slow
def test_a_link_failure_names_the_files_compiled(course, nvcc_version, real_nvcc):
    edit_lessons(course, lambda data: data["lessons"][0].update(sources=["lessons/day01-split/main.cu"]))
    with pytest.raises(BuildError) as caught:
        _build(course, "day01-split", nvcc_version)
    error = caught.value
    assert "scale_on_gpu" in error.message   # ld's own words stay
    assert error.message.splitlines()[-1] == (
        "the link found no definition of a function: lesson 'day01-split' compiled lessons/day01-split/main.cu "
        "only; a program of several files lists each .cu, .cpp or .c in 'sources:' (sources: [kernel.cu, main.cu])")
    assert "undefined reference to `scale_on_gpu(float*, float, int)'" in error.message.splitlines()[-2] + \
        "\n".join(error.message.splitlines())


def test_the_page_shows_every_file_and_finds_snippets_in_any(course):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "orchestrator", "render"], cwd=course, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = (course / "lessons" / "day01-split" / "README.md").read_text()
    assert ("[`lessons/day01-split/main.cu`](main.cu), [`lessons/day01-split/scale.cu`](scale.cu)." in page)
    assert "nvcc -std=c++17 -O3 -I../../common -arch=sm_90 -o main main.cu scale.cu" in page
    assert "[`scale.cu`, lines 5-8](scale.cu#L5-L8)" in page   # the snippet of the second file, linked to it
    assert "lessons/day01-split/scale.cuh" in page.splitlines()[0]   # every file is an input of the page


def _rendered(root: Path) -> dict[str, str]:
    from orchestrator.render.course import render_all
    return {page.name: page.new for page in render_all(load_manifest(root / "lessons.yaml"))}


def _section(page: str, name: str, link: str, language: str, text: str) -> str:
    return f"### [`{name}`]({link})\n\n```{language}\n{text}```\n"


@pytest.mark.parametrize("lesson_id, files", [
    ("day01-split", [("lessons/day01-split/main.cu", "main.cu", "cuda"),
                     ("lessons/day01-split/scale.cu", "scale.cu", "cuda"),
                     ("lessons/day01-split/scale.cuh", "scale.cuh", "cuda"),
                     ("common/check.cuh", "../../common/check.cuh", "cuda")]),
    ("day02-mixed", [("lessons/day02-mixed/atomics.cu", "atomics.cu", "cuda"),
                     ("lessons/day02-mixed/reference.cpp", "reference.cpp", "cpp"),
                     ("common/check.cuh", "../../common/check.cuh", "cuda"),
                     ("lessons/day02-mixed/reference.h", "reference.h", "cpp")]),
])
def test_the_page_shows_each_file_whole_in_its_own_section(course, lesson_id, files):
    pages = _rendered(course)
    page = pages[f"lessons/{lesson_id}/README.md"]
    at = []
    for index, (name, link, language) in enumerate(files):
        # The first unit as render writes it, its Build/Run/Verified lines included; the others as they are.
        text = pages[name] if index == 0 else (course / name).read_text()
        section = _section(page, name, link, language, text)
        assert section in page, name
        at.append(page.index(section))
    assert at == sorted(at), "in the order sources: gives, then the headers"
    assert page.index("## The program's files") < page.index("## Expected output")


def test_a_page_of_one_file_has_no_section_of_files(tmp_path):
    root = _host_course(tmp_path, pages=True)
    page = _rendered(root)["prog/README.md"]
    assert "### [`prog/helper.c`](helper.c)\n\n```c\nint helper(void) { return 42; }\n```\n" in page
    assert "### [`prog/helper.h`](helper.h)\n\n```cpp\n" in page
    edit_lessons(root, lambda data: (data["lessons"][0].pop("sources"), data["lessons"][0].update(source="prog/main.cpp")))
    (root / "prog/main.cpp").write_text('#include <cstdio>\nint main() { std::printf("value = %d\\n", 42); }\n')
    single = _rendered(root)["prog/README.md"]
    assert "## The program's files" not in single and "```cpp\n#include" not in single


def test_files_past_what_a_page_holds_are_named(course, monkeypatch):
    from orchestrator.errors import TemplateError
    from orchestrator.render import program
    monkeypatch.setattr(program, "MAX_CHARACTERS", 1000)
    with open(course / "lessons/day01-split/scale.cu", "a") as file:
        file.write("// " + "x" * 1000 + "\n")
    with pytest.raises(TemplateError) as caught:
        _rendered(course)
    message = str(caught.value)
    assert message.startswith("lessons.yaml:9: lesson 'day01-split': its page shows every file of its program")
    assert "more than the 1,000 a page may hold" in message and "lessons/day01-split/scale.cu 1," in message


def test_a_sanitizer_finding_in_any_file_is_judged_and_linked_there(course):
    """A racecheck finding in scale.cu, expected inside its snippet: judged there, and linked to scale.cu."""
    from orchestrator.judge.evidence import EvidenceMeta, write_evidence
    edit_lessons(course, lambda data: data["lessons"][0].update(
        sanitizers={"racecheck": {"findings": [{"kernel": "scale", "snippet": "scale-kernel"}]}}))
    where = "<where><func>scale</func><path>/gpu/course/lessons/day01-split/scale.cu</path><line>{}</line></where>"
    xml = ('<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n<record><kind>Analysis</kind>'
           '<level>Error</level><what><text>Race condition</text>'
           f'<source><direction>Write</direction>{where.format(7)}</source>'
           f'<destination><direction>Read</direction>{where.format(6)}<count>3</count></destination>'
           '</what></record>\n</ComputeSanitizerOutput>\n')
    log = "========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"
    meta = EvidenceMeta(lesson="day01-split", date="2026-11-29T14:30:58+00:00", gpu_name="NVIDIA H200",
                        gpu_slug="nvidia-h200", compute_capability="9.0", driver_version="580.159.04",
                        cuda_version="13.0", nvcc_version="13.0.88", arch="sm_90",
                        flags=["-std=c++17", "-O3", "-I../../common"], source_sha256="0" * 64,
                        transcript_sha256="", wall_seconds=0.3, exit_status=0, coursectl_version="0.1.0",
                        sanitizer_version="2025.3.1.0")
    write_evidence(course, meta, "n = 1048576\nsum = 3145728.0\n",
                   {"racecheck.log": log.encode(), "racecheck.xml": xml.encode()})
    page = _rendered(course)["lessons/day01-split/README.md"]
    assert "- must find: a finding in scale inside snippet 'scale-kernel' (lines 5-8), and nothing else" in page
    assert "<summary>racecheck: <b>as expected</b>, 1 finding (1 error)</summary>" in page
    assert "- where: write at [scale.cu:7](scale.cu#L7) → read at [scale.cu:6](scale.cu#L6) (3 hazards)" in page


def test_a_snippet_name_in_two_files_is_refused(tmp_path):
    from orchestrator.errors import TemplateError
    from orchestrator.manifest.snippets import lesson_snippets
    for name in ("a.cu", "b.cu"):
        (tmp_path / name).write_text("// snippet: k\nint x;\n// end snippet\n")
    with pytest.raises(TemplateError) as caught:
        lesson_snippets([tmp_path / "a.cu", tmp_path / "b.cu"], ["a.cu", "b.cu"])
    assert "snippet 'k' is also marked in a.cu" in str(caught.value) and str(caught.value).startswith("b.cu:1")


HOST_ONLY = {
    "lessons.yaml": """version: 1
architectures: [sm_90]
lessons:
  - id: day03-host
    title: A program of a C++ file and a C file
    sources: [prog/main.cpp, prog/helper.c]
    sanitizers: {}
    page: {path: prog/README.md}
    output:
      - line: "value = {value:int}"
    claims:
      - id: the-answer
        gate: value == 42
""",
    "prog/main.cpp": '#include <cstdio>\n#include "helper.h"\nint main() { std::printf("value = %d\\n", helper()); }\n',
    "prog/helper.h": '#pragma once\nextern "C" int helper(void);\n',
    "prog/helper.c": "int helper(void) { return 42; }\n",
}


def _host_course(tmp_path: Path, *, pages: bool = False) -> Path:
    """HOST_ONLY written out in tmp_path/host; `pages`: with the fixture's templates and README, to render."""
    root = tmp_path / "host"
    for name, text in HOST_ONLY.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    if pages:
        shutil.copytree(FIXTURE / "templates", root / "templates")
        shutil.copy(FIXTURE / "README.md", root / "README.md")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("edited", ["prog/helper.c", "prog/helper.h"])
def test_verify_offline_names_a_file_of_the_program_edited_since_the_evidence(tmp_path, monkeypatch, fake_gpu,
                                                                              edited):
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "cache"))
    root = _host_course(tmp_path)
    monkeypatch.chdir(root)
    recorded = coursectl("record", "--all")
    assert recorded.exit_code == 0, recorded.stdout + recorded.stderr
    meta = next((root / "evidence" / "day03-host").glob("*/meta.json")).read_text()
    assert all(name in meta for name in ("prog/main.cpp", "prog/helper.c", "prog/helper.h"))
    assert coursectl("verify", "--all", "--offline").exit_code == 0
    with open(root / edited, "a") as file:
        file.write("/* edited */\n")
    again = coursectl("verify", "--all", "--offline")
    assert edited in again.stdout + again.stderr, again.stdout


def test_the_compiler_explorer_link_holds_every_file(tmp_path):
    import subprocess
    import sys
    root = _host_course(tmp_path, pages=True)
    done = subprocess.run([sys.executable, "-m", "orchestrator", "render"], cwd=root, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = (root / "prog" / "README.md").read_text()
    assert ("[Open in Compiler Explorer][compiler-explorer] (the whole of `main.cpp`, `helper.c` and `helper.h`"
            in page)


@pytest.mark.slow
@pytest.mark.parametrize("edited", ["prog/helper.c", "prog/helper.h"])
def test_verify_on_a_gpu_rebuilds_and_names_a_file_of_the_program_edited(tmp_path, monkeypatch, fake_gpu, edited):
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "cache"))
    root = _host_course(tmp_path)
    monkeypatch.chdir(root)
    assert coursectl("record", "--all").exit_code == 0
    before = coursectl("verify", "--all")
    assert before.exit_code == 0 and "rebuilt" not in before.stdout, before.stdout
    with open(root / edited, "a") as file:
        file.write("/* edited */\n")
    again = coursectl("verify", "--all")
    assert again.exit_code == 0, again.stdout + again.stderr
    assert f"day03-host: note: {edited} changed since the" in again.stdout, again.stdout


@pytest.mark.slow
def test_a_lesson_with_no_output_builds_and_runs_but_is_never_pass(tmp_path, monkeypatch, fake_gpu):
    monkeypatch.setenv("COURSECTL_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "host"
    files = dict(HOST_ONLY)
    manifest = files["lessons.yaml"]
    files["lessons.yaml"] = manifest[:manifest.index("    output:")]   # no output, no claims
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.chdir(root)
    assert coursectl("build", "--all").exit_code == 0
    verified = coursectl("verify", "--all")
    assert verified.exit_code == 1, verified.stdout
    assert "day03-host: the lesson checks nothing" in verified.stdout, verified.stdout
    assert "0 passed" in verified.stdout, verified.stdout


def test_a_github_annotation_points_at_the_file_of_the_program_that_holds_the_finding(course, monkeypatch):
    from orchestrator.cli.annotations import workflow_commands
    from orchestrator.cuda.sanitizer import Finding, Report, Summary
    from orchestrator.judge.results import LessonResult, PassResult, Status
    from orchestrator.manifest.passes import Tool
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    manifest = load_manifest(course / "lessons.yaml")
    where = {"lessons/day01-split/main.cu": 12, "lessons/day01-split/scale.cu": 7, "lessons/day01-split/scale.cuh": 3,
             "elsewhere/other.cu": 5}
    findings = [Finding(tool=Tool.RACECHECK, kind="Race", severity="error", text=f"race in {name}", kernel="scale",
                        file=f"/build/{name}", line=line) for name, line in where.items()]
    report = Report(tool=Tool.RACECHECK, exit_status=86, summary=Summary(tool=Tool.RACECHECK, errors=4),
                    findings=findings)
    result = LessonResult(lesson="day01-split", status=Status.FAIL, gpu="nvidia-h200",
                          sanitizers=[PassResult(tool="racecheck", problems=["racecheck: unexpected"], report=report)])
    commands = [line for line in workflow_commands(manifest, [result]) if "racecheck" in line]
    title = "title=day01-split%3A racecheck%3A unexpected Race in scale"
    assert commands == [f"::error file={name},line={line},{title}::race in {name}"
                        for name, line in list(where.items())[:3]] + [f"::error {title}::race in elsewhere/other.cu"]


def test_no_report_may_replace_any_file_of_the_program(tmp_path, monkeypatch):
    """A unit of the program outside lessons/ (prog/helper.c) is a file of the course no report may replace."""
    from orchestrator.cli.report import check_report_paths
    from orchestrator.errors import UsageError
    root = _host_course(tmp_path)
    manifest = load_manifest(root / "lessons.yaml")
    monkeypatch.chdir(root)
    for name, what in (("prog/main.cpp", "the source"), ("prog/helper.c", "the source"), ("prog/helper.h", "a header")):
        with pytest.raises(UsageError) as caught:
            check_report_paths(manifest, {"--junit": Path(name)})
        assert str(caught.value).startswith(f"--junit {name}: ") and f"{what} of lesson 'day03-host'" in str(
            caught.value), str(caught.value)
    check_report_paths(manifest, {"--junit": Path("prog/junit.xml")})   # a file of its own is fine


def test_the_headers_are_looked_for_only_for_a_report_that_leads_into_the_course(tmp_path, monkeypatch):
    """Finding a lesson's headers reads its sources: a report that leads out of the course cannot be one, and
    reads none; one named outside it that leads into a header through a link is refused as that header."""
    from orchestrator.cli import report as report_module
    from orchestrator.errors import UsageError
    root = _host_course(tmp_path)
    manifest = load_manifest(root / "lessons.yaml")
    monkeypatch.chdir(root)
    looked: list[Path] = []
    real_headers = report_module.local_headers
    monkeypatch.setattr(report_module, "local_headers", lambda source, *rest: looked.append(source) or
                        real_headers(source, *rest))
    report_module.check_report_paths(manifest, {"--junit": tmp_path / "elsewhere" / "junit.xml"})
    assert looked == []
    (tmp_path / "into-the-course.xml").symlink_to(root / "prog" / "helper.h")
    with pytest.raises(UsageError) as caught:
        report_module.check_report_paths(manifest, {"--junit": tmp_path / "into-the-course.xml"})
    assert "a header of lesson 'day03-host'" in str(caught.value) and looked, str(caught.value)
    looked.clear()
    report_module.check_report_paths(manifest, {"--junit": Path("prog/junit.xml")})
    assert looked   # inside the course: every source's headers are among the files it may not be
