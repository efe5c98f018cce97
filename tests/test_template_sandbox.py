"""The sandbox templates render in (orchestrator/render/sandbox.py, orchestrator/render/limits.py): a template reads the data it
is given and computes within bounds; anything else is one TemplateError naming the template's file and line, exit 2,
nothing written.

Most tests render a template of their own through markup.render_template; the others run `coursectl render`
on a copy of this repository's course whose day 14 template was changed, as a user would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import interleaved, COURSE, coursectl, snapshot
from orchestrator.render import limits
from orchestrator.transcript.claims import ClaimResult
from orchestrator.errors import TemplateError
from orchestrator.manifest.load import load_manifest
from orchestrator.render.markup import environment, render_template
from orchestrator.render.navigation import NavLink
from orchestrator.render.course import ClaimRow
from orchestrator.transcript.fields import Compare


def render_text(tmp_path: Path, text: str, **context) -> str:
    """`text` rendered as templates/page.md.j2 of a course in tmp_path."""
    folder = tmp_path / "templates"
    folder.mkdir(exist_ok=True)
    (folder / "page.md.j2").write_text(text, encoding="utf-8")
    return render_template(environment(folder), folder, tmp_path, "page.md.j2", context)


def template_error(tmp_path: Path, text: str, **context) -> str:
    with pytest.raises(TemplateError) as caught:
        render_text(tmp_path, text, **context)
    assert caught.value.exit_status == 2
    return str(caught.value)


DAY14 = "templates/lessons/day14-syncthreads.md.j2"


def day14_code(course: Path, payload: str) -> None:
    """Day 14's template, showing `payload` (on line 3) as its code."""
    (course / DAY14).write_text('{% extends "lesson.md.j2" %}\n{% block code %}\n' + payload + "\n{% endblock %}\n",
                                encoding="utf-8")


def refused_everywhere(course: Path, message: str) -> None:
    """`render --check` and `render` both stop with `message` about day 14's line 3, exit 2, nothing written."""
    before = snapshot(course)
    for command in (["render", "--check"], ["render"]):
        result = coursectl(*command)
        assert (result.exit_code, result.stdout) == (2, "")
        assert result.stderr == f"coursectl: error: {DAY14}:3: {message}\n"
    assert snapshot(course) == before


# -- 1. a template reads its data, and calls nothing that reaches outside it ---------------------------------
def test_a_template_calling_a_method_of_a_path_is_refused_and_nothing_happens(course_copy, tmp_path):
    """The data holds paths (lesson.source, lesson.prose): writing, deleting or reading through them is refused."""
    written = tmp_path / "pwned"
    prose = course_copy / "lessons/day14-syncthreads/prose.md"
    for payload, message in [
        (f"{{{{ lesson.source.joinpath('{written}').write_text('owned') }}}}",
         "access to attribute 'joinpath' of 'PosixPath' object is unsafe"),
        ("{{ lesson.prose.unlink() }}", "access to attribute 'unlink' of 'PosixPath' object is unsafe"),
        ("{{ lesson.source.parent.parent.parent.joinpath('/etc/passwd').read_text() }}",
         "access to attribute 'parent' of 'PosixPath' object is unsafe"),
        ("{{ lesson.source|attr('read_text') }}", "access to attribute 'read_text' of 'PosixPath' object is unsafe"),
        ("{{ '{0.source.parent}'.format(lesson) }}", "access to attribute 'parent' of 'PosixPath' object is unsafe"),
    ]:
        day14_code(course_copy, payload)
        refused_everywhere(course_copy, message)
    assert not written.exists()
    assert prose.is_file()


@pytest.mark.parametrize("payload, message", [
    ("{{ lesson.model_dump() }}", "access to attribute 'model_dump' of 'Lesson' object is unsafe"),
    ("{{ lesson.parse_file('/etc/passwd') }}", "access to attribute 'parse_file' of 'Lesson' object is unsafe"),
    ("{{ lesson.output.ignore_patterns[0].compiled.sub('', 'x') }}",
     "access to attribute 'compiled' of 'BoundedRegex' object is unsafe"),
    ("{{ lesson.output.ignore_patterns[0].search('x') }}",
     "access to attribute 'search' of 'BoundedRegex' object is unsafe"),
    ("{% set rows = [1] %}{{ rows.append(2) }}", "access to attribute 'append' of 'list' object is unsafe"),
    ("{{ {'a': 1}.update(b=2) }}", "access to attribute 'update' of 'dict' object is unsafe"),
    ("{{ 'x'.encode() }}", "access to attribute 'encode' of 'str' object is unsafe"),
    ("{{ (1).to_bytes(8) }}", "access to attribute 'to_bytes' of 'int' object is unsafe"),
    ("{{ link.model_copy(update={'text': 'x'}) }}", "access to attribute 'model_copy' of 'NavLink' object is unsafe"),
    ("{{ victim.write_text('x') }}", "access to attribute 'write_text' of 'PosixPath' object is unsafe"),
])
def test_a_template_reads_only_data(tmp_path, payload, message):
    """Plain data, the models' fields and properties, and nothing of Python objects that do things."""
    lesson = load_manifest(COURSE / "lessons.yaml").lesson("day71-matmul-fp16")
    # An ignore pattern, for the payloads that reach for its compiled regex.
    lesson = lesson.model_copy(update={"output": interleaved(lesson.output)})
    assert lesson.output.ignore_patterns
    victim = tmp_path / "victim.txt"
    assert template_error(tmp_path, payload, lesson=lesson, link=NavLink(text="a", link="b"),
                          victim=victim) == f"templates/page.md.j2:1: {message}"
    assert not victim.exists()


def test_a_template_calls_only_what_it_is_handed(tmp_path):
    """A function that is no method of its data, nor handed to the template, cannot be called."""
    message = template_error(tmp_path, "{{ rows[0]('x') }}", rows=[print])
    assert message == "templates/page.md.j2:1: print is not a function a template may call"


def test_what_a_template_may_read_and_call(tmp_path):
    """Strings' methods, dicts' views, models' fields, properties and marked methods, loops, macros, namespaces."""
    claim = ClaimRow(id="c", kind="gate", says="s", expression="x > 0", each=None, where=None,
                     results={"h200": ClaimResult(id="c", kind="gate", says="s", expression="x > 0", held=False)})
    lesson = load_manifest(COURSE / "lessons.yaml").lesson("day14-syncthreads")
    text = ("{{ 'a-b'.replace('-', ' ').upper() }}|{{ ', '.join(['x', 'y']) }}|{{ '{:>5}|{:,}'.format('r', 1234567) }}"
            "|{{ '%-4s|' % 'p' }}{{ d.items()|list }}|{{ d.get('k') }}|{{ claim.missed() }}|{{ lesson.page_path }}"
            "|{{ lesson.source }}|{{ lesson.binary_name }}|{% for x in [1, 2] %}{{ loop.cycle('o', 'e') }}"
            "{{ loop.index }}{% endfor %}|{% macro m(n) %}{{ n * 2 }}{% endmacro %}{{ m(21) }}"
            "|{% set ns = namespace(total=0) %}{% for x in range(4) %}{% set ns.total = ns.total + x %}{% endfor %}"
            "{{ ns.total }}|{% set j = joiner('+') %}{% for x in 'ab' %}{{ j() }}{{ x }}{% endfor %}"
            "|{{ 'ab' * 3 }}|{{ 2 ** 10 }}|{{ [1] + [2] }}|{{ 'x' ~ 1 }}|{{ 'c'|center(5) }}|{{ rule.value }}|")
    assert render_text(tmp_path, text, d={"k": 1}, claim=claim, lesson=lesson, rule=Compare.tolerance) == (
        "A B|x, y|    r|1,234,567|p   |[('k', 1)]|1|['h200']|lessons/day14-syncthreads/README.md"
        "|lessons/day14-syncthreads/syncthreads.cu|syncthreads|o1e2|42|6|a+b|ababab|1024|[1, 2]|x1|  c  |tolerance|")


# -- 2. a template that calls itself, or extends twice ---------------------------------------------------------
def test_a_template_calling_itself_without_end_is_a_template_error(course_copy):
    """Each used to end in a RecursionError and its traceback; now the place that calls itself is named."""
    for payload, message in [
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
         "this macro, block or loop calls itself more than 50 deep, the most a template may"),
        ('{% include "lessons/day14-syncthreads.md.j2" %}',
         "'lessons/day14-syncthreads.md.j2' is included or extended within itself more than 50 deep, the most a "
         "template may"),
        ("{{ self.code() }}", "this macro, block or loop calls itself more than 50 deep, the most a template may"),
        ("{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}",
         "this macro, block or loop calls itself more than 50 deep, the most a template may"),
    ]:
        day14_code(course_copy, payload)
        refused_everywhere(course_copy, message)


def test_a_template_extending_itself_or_extending_twice(course_copy):
    before = snapshot(course_copy)
    for text, message in [
        ('{% extends "lessons/day14-syncthreads.md.j2" %}\n',
         "1: 'lessons/day14-syncthreads.md.j2' is included or extended within itself more than 50 deep, the most a "
         "template may"),
        ('{% extends "lesson.md.j2" %}\n{% extends "lesson.md.j2" %}\n', "1: extended multiple times"),
    ]:
        (course_copy / DAY14).write_text(text, encoding="utf-8")
        result = coursectl("render", "--check")
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"coursectl: error: {DAY14}:{message}\n")
    (course_copy / DAY14).write_text((COURSE / DAY14).read_text())
    assert snapshot(course_copy) == before


def test_a_macro_may_call_itself_50_deep(tmp_path):
    """A recursion that ends within the bound renders; one step deeper is refused."""
    text = "{% macro f(n) %}{% if n %}{{ n }} {{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(DEPTH) }}"
    assert render_text(tmp_path, text.replace("DEPTH", "50")) == " ".join(str(n) for n in range(50, 0, -1)) + " "
    assert template_error(tmp_path, text.replace("DEPTH", "51")) == (
        "templates/page.md.j2:1: this macro, block or loop calls itself more than 50 deep, the most a template may")


# -- 2. a template that builds too much, or takes too long -------------------------------------------------------
BOMBS = [
    ("{{ 'a' * 10**10 }}",
     "'a' * 10000000000 would build 10,000,000,000 characters; a template builds at most 16,777,216"),
    ("{{ [0] * 10**9 }}", "a list of 1 items * 1000000000 would build 1,000,000,000 items; a template builds at "
                          "most 1,000,000"),
    ("{{ 2 ** (10**10) }}", "2 ** 10000000000 would have 10,000,000,000 bits; a template computes with at most 4,096"),
    ("{{ 7 ** 1500 }}", "7 ** 1500 would have 4,212 bits; a template computes with at most 4,096"),
    ("{{ (2 ** 4000) * (2 ** 4000) }}", "a 4001-bit number * a 4001-bit number would have about 8,002 bits; a "
                                        "template computes with at most 4,096"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "'~' built 33,554,432 characters; a template builds at most 16,777,216"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "'ababababababababababababababa...' (16,777,216 characters) + 'ababababababababababababababa...' "
     "(16,777,216 characters) would build 33,554,432 characters; a template builds at most 16,777,216"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = '%s%s' % (ns.s, ns.s) %}{% endfor %}",
     "'%s%s' % a tuple of 2 items built 33,554,432 characters; a template builds at most 16,777,216"),
    ("{{ '%9999999999d' % 1 }}",
     "'%9999999999d' % 1 would build 9,999,999,999 characters; a template builds at most 16,777,216"),
    ("{{ 'a'.center(10**10) }}", "center() would build 10,000,000,000 characters; a template builds at most "
                                 "16,777,216"),
    ("{{ ('a' * 1000).replace('a', 'b' * 100000) }}",
     "replace() would build 100,000,000 characters; a template builds at most 16,777,216"),
    ("{{ ''.join(['x' * 100000] * 1000) }}",
     "join() would build 100,000,000 characters; a template builds at most 16,777,216"),
    ("{{ '{:>9999999999}'.format(1) }}",
     "format() would build 9,999,999,999 characters; a template builds at most 16,777,216"),
    ("{{ '{:>{}}'.format(1, 10**9) }}",
     "format() would build 1,000,000,000 characters; a template builds at most 16,777,216"),
    ("{{ 'a'|center(10**10) }}",
     "the filter center would build 10,000,000,000 characters; a template builds at most 16,777,216"),
    ("{{ ('a\\n' * 1000000)|indent(100) }}",
     "the filter indent would build 102,000,100 characters; a template builds at most 16,777,216"),
    ("{{ (['x' * 100000] * 1000)|join }}",
     "the filter join would build 100,000,000 characters; a template builds at most 16,777,216"),
    ("{{ ('x' * 1000)|replace('x', 'y' * 100000) }}",
     "the filter replace would build 100,000,000 characters; a template builds at most 16,777,216"),
    ("{{ '%9999999999s'|format(1) }}",
     "the filter format would build 9,999,999,999 characters; a template builds at most 16,777,216"),
    ("{{ [1, 2]|batch(10**9, 0)|list }}",
     "the filter batch would build 1,000,000,000 items; a template builds at most 1,000,000"),
    ("{{ range(10)|slice(10**9)|list }}",
     "the filter slice would build 1,000,000,000 items; a template builds at most 1,000,000"),
    ("{{ {'a': 1}|tojson(indent=10**9) }}",
     "the filter tojson would build 1,000,000,000 items; a template builds at most 1,000,000"),
    ("{{ ([[1] * 1000] * 1000)|sum(start=[]) }}",
     "the filter sum would copy 1,000,000,000 items; a template builds at most 1,000,000"),
    ("{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
     "the text it renders passes 16,777,216 characters; a template builds at most 16,777,216"),
    ("{% macro m() %}{% for i in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}{% endmacro %}{{ m() }}",
     "the text it renders passes 16,777,216 characters; a template builds at most 16,777,216"),
    ("{{ lipsum(10**6) }}", "lipsum makes at most 100 paragraphs of at most 1000 words"),
]


@pytest.mark.parametrize("payload, message", BOMBS, ids=range(len(BOMBS)))
def test_a_template_building_past_a_bound_is_refused_at_once(tmp_path, payload, message):
    """Each used to end in a MemoryError, or took minutes and gigabytes; now it is refused before it is built."""
    assert template_error(tmp_path, payload) == f"templates/page.md.j2:1: {message}"


def test_a_string_bomb_in_a_lesson_template_is_one_line_and_exit_2(course_copy):
    day14_code(course_copy, "{{ 'a' * 10**10 }}")
    refused_everywhere(course_copy,
                       "'a' * 10000000000 would build 10,000,000,000 characters; a template builds at most 16,777,216")


def test_a_template_still_rendering_after_its_time_is_stopped_where_it_stands(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "TEMPLATE_SECONDS", 0.3)
    text = "\n{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    assert template_error(tmp_path, text) == ("templates/page.md.j2:2: still rendering after 0.3 s, the most a "
                                              "template may take")


# -- the code generated from a template, remembered for the process ----------------------------------------------
def test_a_template_read_again_from_another_folder_reuses_its_code_yet_names_its_own_file(tmp_path, monkeypatch):
    """The code generated from a template's text is kept for the process; an error still names the file read."""
    import jinja2

    parsed: list[str] = []
    parse = jinja2.Environment._parse
    monkeypatch.setattr(jinja2.Environment, "_parse",
                        lambda self, source, name, filename: parsed.append(filename) or parse(self, source, name,
                                                                                              filename))
    text = "{% set unique = 'reuse-test-7f3a' %}first line\n{{ undefined_here }}\n"
    first, second = tmp_path / "a", tmp_path / "b"
    for course in (first, second):
        course.mkdir()
        assert template_error(course, text) == f"templates/page.md.j2:2: 'undefined_here' is undefined"
        with pytest.raises(TemplateError) as caught:
            render_text(course, text)
        assert caught.value.path == "templates/page.md.j2" and caught.value.line == 2
    assert parsed == [str(first / "templates" / "page.md.j2")]
    # Another text, or the same text under other settings, is generated anew.
    assert render_text(second, text.replace("{{ undefined_here }}", "{{ 1 + 1 }}")) == "first line\n2\n"
    assert len(parsed) == 2
