"""What pages are written with: the sandboxed Jinja environment, its filters, and the banner of every page.

Templates are text anyone can edit, so they render in a sandbox (sandbox.py,
limits.py): they format data, never reach Python's internals, a file or a
shell, and compute within bounds; every failure is one TemplateError naming
the template's file and line.
"""

from __future__ import annotations

import os

from pathlib import Path

import jinja2

from ..errors import TemplateError
from .figures import format_number
from ..files import TEXT_LIMIT, read_text, relative
from .limits import Problem, time_limit
from .sandbox import Sandbox
from ..markdown import cell, code, fence, html, md, mermaid_string
from ..words import command_line, plural

TEMPLATES = "templates"


# -- templates ---------------------------------------------------------------------------
class _Loader(jinja2.FileSystemLoader):
    """Templates from one folder, each read as coursectl reads every file (files.read_text).

    jinja2's own loader reads a file whole, and raises UnicodeDecodeError for
    one that is not UTF-8; here that is one TemplateError naming the template
    and the line, and so is a template larger than 16 MiB, one that is no
    regular file (a device, a named pipe), and one reached through a link that
    leads out of the course (`templates/` itself linked elsewhere included).
    """

    def __init__(self, templates: Path):
        super().__init__(str(templates))
        self.templates = Path(templates)

    def get_source(self, environment: jinja2.Environment, template: str):
        path = self.templates.joinpath(*jinja2.loaders.split_template_path(template))
        shown = relative(path, self.templates.parent)
        text = read_text(path, TEXT_LIMIT, "a template", TemplateError, shown=shown, root=self.templates.parent)
        if text is None:
            raise jinja2.TemplateNotFound(template)
        mtime = path.stat().st_mtime

        def uptodate() -> bool:
            try:
                return path.stat().st_mtime == mtime
            except OSError:
                return False
        return text, os.path.normpath(path), uptodate


def environment(templates: Path) -> jinja2.Environment:
    env = Sandbox(loader=_Loader(templates), undefined=jinja2.StrictUndefined,
                  keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters.update(md=md, cell=cell, code=code, mq=mermaid_string, number=format_number, html=html,
                       plural=plural, shell=lambda word: command_line(str(word)))   # a word of a command line
    env.bound_filters()
    env.globals.update(fence=fence)
    return env


def render_template(env: jinja2.Environment, templates: Path, root: Path, name: str, context: dict) -> str:
    """Render one template; every failure becomes one TemplateError naming template:line."""
    try:
        with time_limit():
            return env.get_template(name).render(**context)
    except jinja2.TemplateSyntaxError as exc:
        where = relative(Path(exc.filename), root) if exc.filename else f"{TEMPLATES}/{name}"
        raise TemplateError(f"template syntax error: {exc.message}", path=where, line=exc.lineno) from None
    except (jinja2.TemplateError, Problem, TypeError, ValueError, KeyError, AttributeError, ArithmeticError,
            RecursionError, MemoryError) as exc:
        path, line = _template_location(exc, templates, root)
        raise TemplateError(_what_went_wrong(exc, templates, root), path=path or relative(templates / name, root),
                            line=line) from None


def _what_went_wrong(exc: BaseException, templates: Path, root: Path) -> str:
    """A rendering error in words: jinja's own (an undefined name, a template extended twice: "extended
    multiple times"), a template missing, the sandbox's or its bounds', or Python's limits reached all the same."""
    if isinstance(exc, jinja2.TemplateNotFound):
        return f"no template {exc.name!r} in {relative(templates, root)}/"
    if isinstance(exc, RecursionError):
        return "a macro, an include or a block calls itself without end: templates nest past Python's recursion limit"
    if isinstance(exc, MemoryError):
        return "ran out of memory rendering it"
    return exc.message if isinstance(exc, jinja2.TemplateError) and exc.message else str(exc)


def _template_location(exc: BaseException, templates: Path, root: Path) -> tuple[str | None, int | None]:
    """The innermost template frame of a rendering error's traceback: (file, line)."""
    found: tuple[str | None, int | None] = (None, None)
    folder = templates.resolve()
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        template = tb.tb_frame.f_globals.get("__jinja_template__")
        if template is not None and template.filename:
            found = (relative(Path(template.filename), root), template.get_corresponding_lineno(tb.tb_lineno))
        elif filename and Path(filename).resolve().is_relative_to(folder):
            found = (relative(Path(filename), root), tb.tb_lineno)
        tb = tb.tb_next
    return found





# How the first line of every page render writes begins: render overwrites no file without it.
BANNER_START = "<!-- Generated by coursectl render from "


def banner(inputs: list[str], what: str) -> str:
    listed = ", ".join(inputs[:-1]) + f" and {inputs[-1]}" if len(inputs) > 1 else inputs[0]
    return f"{BANNER_START}{listed}: edit those, not {what}. -->"


def with_banner(line: str, text: str) -> str:
    return line + "\n" + text.lstrip("\n").rstrip("\n") + "\n"
