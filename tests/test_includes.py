"""orchestrator.includes: the local headers a source includes, found as nvcc's preprocessor finds them."""

from __future__ import annotations

from pathlib import Path

from orchestrator.includes import include_dirs, local_headers


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
