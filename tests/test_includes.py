"""orchestrator.cuda.includes: the local headers a source includes, found as nvcc's preprocessor finds them."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cuda.includes import include_dirs, local_headers, places_looked


def test_include_dirs_read_every_spelling_relative_to_the_sources_folder(tmp_path):
    flags = ["-O3", "-Icommon", "-I", "../shared", "--include-path=inc", "--include-path", "/opt/x", "-lineinfo"]
    assert include_dirs(flags, tmp_path / "ext") == [tmp_path / "ext/common", tmp_path / "shared",
                                                     tmp_path / "ext/inc", Path("/opt/x")]


def test_local_headers_follow_quoted_and_angled_includes_inside_the_course(tmp_path):
    files = {
        "ext/a.cu": '#include <cstdio>\n#include "near.cuh"\n  #  include <check.cuh>\n// #include "commented.cuh"\n'
                    '#include "missing.cuh"\n',
        "ext/near.cuh": '#include "check.cuh"\n#include "deeper/more.cuh"\n',   # check.cuh: found in -Icommon
        "ext/deeper/more.cuh": '#include "../near.cuh"\n',                       # already found: not twice
        "ext/common/check.cuh": "#pragma once\n",
        "ext/commented.cuh": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = local_headers(tmp_path / "ext/a.cu", ["-Icommon"], tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "ext/near.cuh", "ext/common/check.cuh", "ext/deeper/more.cuh"]
    assert local_headers(tmp_path / "ext/a.cu", ["-Icommon"], tmp_path / "ext/deeper") == []  # outside the root


def test_places_looked_are_those_searched_before_each_header_and_found_empty(tmp_path):
    """Where a header that appears would be read instead of the one found, or make __has_include true."""
    files = {
        "course/ext/a.cu": '#include <cstdio>\n#include "check.cuh"\n#if __has_include("opt.cuh")\n#endif\n',
        "course/ext/common/check.cuh": '#include "near.cuh"\n',
        "course/ext/common/near.cuh": "",    # beside check.cuh: found first, nothing searched before it
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    root = tmp_path / "course"
    looked = places_looked(root / "ext/a.cu", [root / "ext/common/check.cuh", root / "ext/common/near.cuh"],
                           ["-Icommon", "-I../../outside"], root)
    assert [p.relative_to(root).as_posix() for p in looked] == [
        "ext/common/cstdio",                   # <cstdio>: the -I folders before the system's
        "ext/check.cuh",                       # "check.cuh": beside the source, then common/, where it is
        "ext/opt.cuh", "ext/common/opt.cuh"]   # found nowhere; ../../outside is not the course's
