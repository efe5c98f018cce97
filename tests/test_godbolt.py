"""orchestrator.render.godbolt: Compiler Explorer links, read back as Compiler Explorer reads them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from godbolt_decoder import decode_godbolt, decompress_from_base64
from orchestrator.render.godbolt import compress_to_base64, godbolt_url, minify, rison, risonify

REPO = Path(__file__).resolve().parent.parent
NODE_MODULES = REPO / "tools" / "browser-check" / "node_modules"

SOURCES = [
    "",
    "a",
    "int main() { return 0; }\n",
    "printf(\"%d%%\\n\", x); // 100% + a 'quote' and a bang!\n",
    "// unicode: é → 😀, and (parens), commas, colons: $@*\n" * 20,
]


@pytest.mark.parametrize("source", SOURCES)
def test_a_link_decodes_back_to_its_source_compiler_and_flags(source):
    url = godbolt_url(source, "cuda", "nvcc130", "-std=c++17 -O3 -arch=sm_90")
    assert url.startswith("https://godbolt.org/#z:")
    assert decode_godbolt(url) == {"version": 4, "content": [{"type": "row", "content": [
        {"type": "component", "componentName": "codeEditor",
         "componentState": {"id": 1, "lang": "cuda", "source": source}},
        {"type": "component", "componentName": "compiler",
         "componentState": {"source": 1, "lang": "cuda", "compiler": "nvcc130",
                            "options": "-std=c++17 -O3 -arch=sm_90"}}]}]}


def test_every_lesson_link_decodes_to_its_whole_source():
    for source in sorted(REPO.glob("lessons/*/*.cu")):
        text = source.read_text(encoding="utf-8")
        url = godbolt_url(text, "cuda", "nvcc130", "-O3")
        editor, compiler = decode_godbolt(url)["content"][0]["content"]
        assert editor["componentState"]["source"] == text
        assert compiler["componentState"]["options"] == "-O3"
        # lz-string over the rison text against the base64 JSON /clientstate/ link: under three quarters of
        # its length, and under half once a source is long enough for lz-string's dictionary to pay (16 KB).
        clientstate = len(json.dumps(text)) * 4 / 3
        assert len(url) < (0.5 if len(text) > 16_000 else 0.75) * clientstate


def test_rison_as_compiler_explorer_writes_it():
    assert rison({"b": [1, True, None], "a": "it's!", "c": "", "d": "plain_id", "e": "-x", "f": "a b"}) == (
        "(a:'it!'s!!',b:!(1,!t,!n),c:'',d:plain_id,e:'-x',f:'a b')")
    assert risonify({"z": "AbC+/="}) == "z:AbC%2B/%3D"
    assert risonify({"z": "0bC"}) == "z:'0bC'"
    assert risonify({"s": "a b,c:d"}) == "s:'a+b,c:d'"


def test_minify_uses_golden_layouts_tables():
    assert minify({"type": "row", "content": [{"componentName": "codeEditor", "isClosable": True,
                                               "componentState": {"id": 1, "lang": "x"}}]}) == {
        "l": "2", "g": [{"h": "codeEditor", "n": "0", "i": {"j": 1, "lang": "___x"}}]}


@pytest.mark.parametrize("text", ["", "a", "abababababab", "\u00e9\u2192\U0001F600 x" * 30])
def test_lz_string_round_trip(text):
    assert decompress_from_base64(compress_to_base64(text)) == text


@pytest.mark.browser
@pytest.mark.skipif(shutil.which("node") is None or not (NODE_MODULES / "lz-string").is_dir(),
                    reason="needs node and tools/browser-check/setup.sh's node_modules")
def test_lz_string_matches_the_javascript_original_byte_for_byte():
    texts = [*SOURCES, *(p.read_text(encoding="utf-8") for p in sorted(REPO.glob("lessons/*/*.cu")))]
    script = ("const lz = require(process.argv[1]); let s = ''; process.stdin.on('data', d => s += d)"
              ".on('end', () => process.stdout.write(JSON.stringify(JSON.parse(s).map(lz.compressToBase64))))")
    done = subprocess.run(["node", "-e", script, str(NODE_MODULES / "lz-string")], input=json.dumps(texts),
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == [compress_to_base64(text) for text in texts]


def test_a_source_with_headers_opens_as_a_tree_holding_every_file():
    """Compiler Explorer's multi-file state: a tree of files, the main one named example.cu, compiled as a tree."""
    headers = {"common/check.cuh": "#pragma once\n#define CHECK(x) (x)\n", "util.cuh": "// 'quotes' and (parens)!\n"}
    url = godbolt_url("#include \"check.cuh\"\nint main() {}\n", "cuda", "nvcc130", "-O3 -Icommon", headers)
    tree, editor, compiler = decode_godbolt(url)["content"][0]["content"]
    assert (tree["componentName"], editor["componentName"], compiler["componentName"]) == (
        "tree", "codeEditor", "compiler")
    state = tree["componentState"]
    assert (state["id"], state["isCMakeProject"], state["compilerLanguageId"], state["newFileId"]) == (
        1, False, "cuda", 4)
    assert [(f["fileId"], f["filename"], f["isMainSource"], f["isIncluded"], f["isOpen"], f["editorId"])
            for f in state["files"]] == [(1, "example.cu", True, True, True, 1),
                                         (2, "common/check.cuh", False, True, False, -1),
                                         (3, "util.cuh", False, True, False, -1)]
    assert {f["filename"]: f["content"] for f in state["files"]} == {
        "example.cu": "#include \"check.cuh\"\nint main() {}\n", **headers}
    assert editor["componentState"] == {"id": 1, "lang": "cuda", "source": "#include \"check.cuh\"\nint main() {}\n"}
    assert compiler["componentState"] == {"tree": 1, "lang": "cuda", "compiler": "nvcc130", "options": "-O3 -Icommon"}


def test_without_headers_the_link_is_the_single_file_one():
    assert godbolt_url("int x;\n", "cuda", "nvcc130", "-O3", {}) == godbolt_url("int x;\n", "cuda", "nvcc130", "-O3")
