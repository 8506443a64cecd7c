"""Generated Kafka message schemas (see tools/generate_schemas.py). Do not edit."""

from .coordinator import SCHEMAS as _coordinator
from .headers_data import SCHEMAS as _headers_data
from .requests import SCHEMAS as _requests
from .responses import SCHEMAS as _responses

SCHEMAS = {**_requests, **_responses, **_headers_data, **_coordinator}
