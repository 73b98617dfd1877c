"""Preview rendering: engine events → a per-worker, per-connection report.

Pure: nothing here talks to the engine. The ``twc preview`` command runs the preview and
hands over what ``on_event`` received::

    events: list[EngineEvent] = []
    try:
        stack.preview(diff=True, on_event=events.append)
        failure = None
    except CommandError as exc:
        failure = str(exc)
    report = build_report(events, project, stack_name, failure=failure)
    print(render_markdown(report))            # or render_text / render_json
    sys.exit(exit_code(report, detailed=args.detailed_exitcode))

Secrets never reach a rendering: values are scrubbed when events are read (see
:mod:`twc.preview._redact`). The JSON form is documented in ``docs/preview-json.md``.
"""

from twc.preview._build import (
    CLUSTER_CONNECTION_TYPE,
    CONNECTION_ANNOTATION,
    CONNECTION_SPEC_HASH_ANNOTATION,
    CONNECTION_TYPE,
    QUEUE_TYPE,
    REPLICAS_SOURCE_ANNOTATION,
    WORKER_TYPE,
    build_report,
    events_from_json,
)
from twc.preview._merge import merge_reports
from twc.preview._model import (
    SCHEMA_VERSION,
    Diagnostic,
    FieldChange,
    Group,
    GroupKind,
    HeldDeletions,
    OpCounts,
    Operation,
    PreviewReport,
    Reason,
    ReasonCode,
    ResourceChange,
    Summary,
)
from twc.preview._redact import SECRET, UNKNOWN
from twc.preview._render import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    MARKDOWN_LIMIT,
    TRUNCATION_NOTICE,
    exit_code,
    render_json,
    render_markdown,
    render_text,
)

__all__ = [
    "CLUSTER_CONNECTION_TYPE",
    "CONNECTION_ANNOTATION",
    "CONNECTION_SPEC_HASH_ANNOTATION",
    "CONNECTION_TYPE",
    "EXIT_CHANGES",
    "EXIT_ERROR",
    "EXIT_OK",
    "MARKDOWN_LIMIT",
    "QUEUE_TYPE",
    "REPLICAS_SOURCE_ANNOTATION",
    "SCHEMA_VERSION",
    "SECRET",
    "TRUNCATION_NOTICE",
    "UNKNOWN",
    "WORKER_TYPE",
    "Diagnostic",
    "FieldChange",
    "Group",
    "GroupKind",
    "HeldDeletions",
    "OpCounts",
    "Operation",
    "PreviewReport",
    "Reason",
    "ReasonCode",
    "ResourceChange",
    "Summary",
    "build_report",
    "events_from_json",
    "exit_code",
    "merge_reports",
    "render_json",
    "render_markdown",
    "render_text",
]
