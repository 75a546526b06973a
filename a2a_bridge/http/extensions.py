"""Extensions a card marks required (specification section 3.3.4): a request that does not name each of them in its
`A2A-Extensions` service parameter gets ExtensionSupportRequiredError, before any method runs."""

from a2a.server.context import ServerCallContext
from a2a.types import AgentCard
from a2a.utils.errors import ExtensionSupportRequiredError
from starlette.requests import Request

from a2a_bridge.core.auth import BridgeContextBuilder, Principal


def required_extensions(card: AgentCard) -> frozenset[str]:
    return frozenset(extension.uri for extension in card.capabilities.extensions if extension.required)


def check_required(required: frozenset[str], context: ServerCallContext) -> None:
    """Raises ExtensionSupportRequiredError naming the required extensions the request did not name."""
    missing = sorted(required - context.requested_extensions)
    if missing:
        raise ExtensionSupportRequiredError("Extension support required", data={"extensions": ",".join(missing)})


class RequiredExtensionsContextBuilder(BridgeContextBuilder):
    """The bridge's context builder, refusing a request that leaves out an extension the card requires."""

    def __init__(
        self, tokens: dict[str, Principal], base_path: str, required: frozenset[str], public_url: str | None = None
    ) -> None:
        super().__init__(tokens, base_path, public_url)
        self.required = required

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        check_required(self.required, context)
        return context
