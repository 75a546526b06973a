"""The TCK's own defects: requirements whose test fails against a server that does what the specification says.
Each names the TCK commit it was found in and the evidence (docs/conformance.md repeats them)."""

from dataclasses import dataclass

TCK_COMMIT = "357c4a8"


@dataclass(frozen=True)
class Defect:
    requirement: str
    transports: frozenset[str]
    evidence: str


DEFECTS: tuple[Defect, ...] = (
    Defect(
        "CORE-SEND-003",
        frozenset({"jsonrpc", "http_json", "grpc"}),
        "The requirement says a part with an unsupported media type MUST get ContentTypeNotSupportedError, but its "
        "RequirementSpec (tck/requirements/core_operations.py) sets no `expected_error`, so the generic runner "
        "(tests/compatibility/core_operations/test_requirements.py, `_validate_response`) expects the SendMessage to "
        "succeed. The bridge answers -32005 / HTTP 415 / INVALID_ARGUMENT with reason CONTENT_TYPE_NOT_SUPPORTED, "
        "the error the requirement names; the TCK reports 'Operation failed: Content type not supported'.",
    ),
)
"""The MUST failures that are the TCK's, by requirement and the bindings they fail on."""


def known(requirement: str, transport: str) -> Defect | None:
    """The listed defect that explains a failure of `requirement` on `transport`, if any."""
    return next((d for d in DEFECTS if d.requirement == requirement and transport in d.transports), None)
