"""`coursectl check LESSON T --against T0`: one transcript's fields judged against another's, without a GPU.

T0 stands where verify has the recorded evidence: each field of T is
judged against T0's under the lesson's rules by comparison.compare_fields,
the function verify and record judge with, as on one GPU (device and
tolerance fields are compared, volatile ones never). So an author can try a
field's rule and tolerance on two transcripts of the program. Nothing here
prints.
"""

from __future__ import annotations

from pydantic import BaseModel

from ..errors import TranscriptError
from ..judge.comparison import FieldResult, compare_fields
from ..manifest.model import Lesson, Manifest
from ..transcript.parse import Transcript, flatten, parse_transcript
from .authoring import read_transcript, schema_mismatch


class Against(BaseModel):
    """A transcript's fields, each judged against a reference transcript's."""

    name: str                   # the transcript judged, as the messages name it
    reference: str              # the transcript it is judged against
    fields: list[FieldResult]

    @property
    def failed(self) -> bool:
        return any(f.status.is_failure for f in self.fields)


def check_against(manifest: Manifest, lesson: Lesson, transcript: Transcript, name: str, reference: str) -> Against:
    """`transcript` (parsed, named `name`) against the transcript file `reference` (- for standard input).

    A reference that does not match the lesson's schema raises
    SchemaMismatch, naming its line and the schema item in lessons.yaml.
    """
    text = read_transcript(reference)
    shown = "<stdin>" if reference == "-" else reference
    try:
        parsed = parse_transcript(lesson.output, text, shown)
    except TranscriptError as exc:
        raise schema_mismatch(manifest, lesson, exc) from None
    new = list(flatten(lesson.output.items, transcript.scope))
    old = list(flatten(lesson.output.items, parsed.scope))
    return Against(name=name, reference=shown, fields=compare_fields(new, old, same_gpu=True))
