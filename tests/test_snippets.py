"""orchestrator.manifest.snippets: `// snippet: NAME` ... `// end snippet[: NAME]` in lesson sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import TemplateError
from orchestrator.manifest.snippets import MARKER_HINT, Snippet, extract_snippets

REPO = Path(__file__).resolve().parent.parent

SOURCE = """\
// A lesson.
// snippet: outer
int a = 1;
    // snippet: inner
    int b = 2;
    // end snippet
int c = 3;
// end snippet: outer

// snippet: last
int d = 4;
// end snippet
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lesson.cu"
    path.write_text(text, encoding="utf-8")
    return path


def test_named_nested_and_unnamed_ends(tmp_path):
    path = write(tmp_path, SOURCE)
    assert extract_snippets(path, "lessons/x/lesson.cu") == {
        "inner": Snippet(name="inner", path="lessons/x/lesson.cu", first_line=5, last_line=5,
                         text="    int b = 2;\n"),
        "outer": Snippet(name="outer", path="lessons/x/lesson.cu", first_line=3, last_line=7,
                         text="int a = 1;\n    int b = 2;\nint c = 3;\n"),
        "last": Snippet(name="last", path="lessons/x/lesson.cu", first_line=11, last_line=11,
                        text="int d = 4;\n"),
    }


def test_an_unnamed_end_closes_the_innermost(tmp_path):
    path = write(tmp_path, "// snippet: a\nx\n// snippet: b\ny\n// end snippet\nz\n// end snippet\n")
    snippets = extract_snippets(path, "f.cu")
    assert (snippets["b"].first_line, snippets["b"].last_line, snippets["b"].text) == (4, 4, "y\n")
    assert (snippets["a"].first_line, snippets["a"].last_line, snippets["a"].text) == (2, 6, "x\ny\nz\n")


@pytest.mark.parametrize("odd", ["\f", "\v", "\x1d", "\x85", "\u2029"])
def test_line_numbers_are_the_compilers_whatever_python_splits_lines_at(tmp_path, odd):
    """A form feed above a snippet does not move it: str.splitlines() would have ended a line there."""
    path = write(tmp_path, f"// page one{odd}\n{odd}// page two\n// snippet: s\nint x;{odd}int y;\n// end snippet\n")
    [snippet] = extract_snippets(path, "f.cu").values()
    assert (snippet.first_line, snippet.last_line, snippet.text) == (4, 4, f"int x;{odd}int y;\n")


def test_no_markers_no_snippets(tmp_path):
    assert extract_snippets(write(tmp_path, "int main() {}\n")) == {}


def test_text_is_read_instead_of_the_file(tmp_path):
    path = write(tmp_path, "// nothing here\n")
    snippets = extract_snippets(path, "f.cu", text="\n// snippet: k\nk();\n// end snippet: k\n")
    assert snippets == {"k": Snippet(name="k", path="f.cu", first_line=3, last_line=3, text="k();\n")}


@pytest.mark.parametrize("text, message", [
    ("// snippet: a\n// end snippet\n// snippet: a\n// end snippet\n",
     "f.cu:3: snippet 'a' is defined twice"),
    ("// snippet: a\n// snippet: a\n// end snippet\n// end snippet\n",
     "f.cu:2: snippet 'a' is defined twice"),
    ("x\n// end snippet\n",
     "f.cu:2: 'end snippet' with no snippet open"),
    ("// snippet: a\n// snippet: b\n// end snippet: a\n// end snippet\n",
     "f.cu:3: 'end snippet: a' closes 'b' (opened at line 2)"),
    ("x\n// snippet: a\ny\n",
     "f.cu:2: snippet 'a' is never closed"),
    ("// snippet: a\n// snippet: b\n// end snippet\n",
     "f.cu:1: snippet 'a' is never closed"),
    ("// snippet racy\n",
     "f.cu:1: malformed snippet marker '// snippet racy'; write '// snippet: NAME' or '// end snippet[: NAME]'"),
    ("// snippet: a\n// end snippet a\n",
     "f.cu:2: malformed snippet marker '// end snippet a'; write '// snippet: NAME' or '// end snippet[: NAME]'"),
])
def test_marker_errors_name_file_and_line(tmp_path, text, message):
    with pytest.raises(TemplateError) as caught:
        extract_snippets(write(tmp_path, text), "f.cu")
    assert str(caught.value) == message
    assert caught.value.exit_status == 2
    assert caught.value.hint == MARKER_HINT


def test_the_lessons_snippets():
    names = {
        "lessons/day13-shared-memory/shared_memory.cu": ["shared-optin", "tiled-kernel"],
        "lessons/day14-syncthreads/syncthreads.cu": ["barrier", "early-return", "racy"],
        "lessons/day16-tiled-matmul/tiled_matmul.cu": ["naive-kernel", "tiled-kernel"],
        "lessons/day71-matmul-fp16/matmul_fp16.cu": ["f16-accumulate", "f32-accumulate", "k-scaled-gate"],
    }
    for source, expected in names.items():
        snippets = extract_snippets(REPO / source, source)
        assert sorted(snippets) == expected
        for snippet in snippets.values():
            assert snippet.text.strip() and "snippet" not in snippet.text


# -- snippets by function name and by line range, without markers --------------------------
from orchestrator.manifest.snippets import SnippetSpec, declared_snippet, function_spans  # noqa: E402

UPSTREAM = """\
// scale(x) in a comment is no definition
template <int N>
__global__ void scale(float *x)
{
    const char *s = "}";   // a brace in a string: not counted
    x[threadIdx.x] *= N; /* } */
}

__global__ void other(float *x);

int main()
{
    scale<4><<<1, 32>>>(nullptr);
    return 0;
}
"""


def test_a_function_snippet_is_its_definition_with_its_template_line():
    assert function_spans(UPSTREAM, "scale") == [(2, 7)]
    snippet = declared_snippet("k", SnippetSpec(function="scale"), "up.cu", UPSTREAM)
    assert (snippet.first_line, snippet.last_line) == (2, 7)
    assert snippet.text.startswith("template <int N>\n__global__ void scale") and snippet.text.endswith("}\n")


def test_a_declaration_call_or_launch_is_no_definition():
    assert function_spans(UPSTREAM, "other") == []
    assert function_spans(UPSTREAM, "main") == [(11, 15)]


def test_a_function_that_matches_nothing_or_twice_names_the_file():
    with pytest.raises(TemplateError) as info:
        declared_snippet("k", SnippetSpec(function="other"), "lessons/x/up.cu", UPSTREAM)
    assert "no definition of function 'other' in lessons/x/up.cu" in str(info.value)
    twice = UPSTREAM + "\nvoid main2() {}\nint main() { return 1; }\n"
    with pytest.raises(TemplateError) as info:
        declared_snippet("k", SnippetSpec(function="main"), "up.cu", twice)
    assert "2 definitions (lines 11, 18) of function 'main' in up.cu" in str(info.value)


def test_a_line_range_snippet():
    snippet = declared_snippet("r", SnippetSpec(lines="11-12"), "up.cu", UPSTREAM)
    assert snippet.text == "int main()\n{\n"
    with pytest.raises(TemplateError, match=r"lines 11-99 pass the end of up.cu \(15 lines\)"):
        declared_snippet("r", SnippetSpec(lines="11-99"), "up.cu", UPSTREAM)


@pytest.mark.parametrize("spec, message", [
    ({}, "give one of 'function: NAME'"),
    ({"function": "a", "lines": "1-2"}, "give one of 'function: NAME'"),
    ({"lines": "9-3"}, "must be A-B, 1 <= A <= B"),
])
def test_a_snippet_spec_gives_one_of_function_or_lines(spec, message):
    with pytest.raises(ValueError, match=message):
        SnippetSpec(**spec)
