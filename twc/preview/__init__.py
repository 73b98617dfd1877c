"""Preview rendering, pure: the engine events of ``stack.preview(diff=True)`` become a
per-worker, per-connection report (secrets scrubbed as events are read), rendered as text,
Markdown (a PR comment) or JSON (docs/preview-json.md)."""

from twc.preview._build import build_report as build_report
from twc.preview._build import merge_reports as merge_reports
from twc.preview._model import SCHEMA_VERSION as SCHEMA_VERSION
from twc.preview._model import Group as Group
from twc.preview._model import GroupKind as GroupKind
from twc.preview._model import HeldDeletions as HeldDeletions
from twc.preview._model import Operation as Operation
from twc.preview._model import PreviewReport as PreviewReport
from twc.preview._model import ReasonCode as ReasonCode
from twc.preview._render import EXIT_CHANGES as EXIT_CHANGES
from twc.preview._render import EXIT_ERROR as EXIT_ERROR
from twc.preview._render import EXIT_OK as EXIT_OK
from twc.preview._render import MARKDOWN_LIMIT as MARKDOWN_LIMIT
from twc.preview._render import TRUNCATION_NOTICE as TRUNCATION_NOTICE
from twc.preview._render import exit_code as exit_code
from twc.preview._render import render_json as render_json
from twc.preview._render import render_markdown as render_markdown
from twc.preview._render import render_text as render_text
from twc.preview._values import SECRET as SECRET
