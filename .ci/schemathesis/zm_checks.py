"""zero-memory's own schemathesis checks (loaded with SCHEMATHESIS_HOOKS).

Every error response carries the contract's error body, and its HTTP status
is the status of its code.
"""
import json

import schemathesis

STATUS = {
    "validation_failed": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "rate_limited": 429,
    "internal": 500,
}


@schemathesis.check
def error_body_matches_status(ctx, response, case):
    if response.status_code < 400:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"error response {response.status_code} is not JSON") from None
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or set(body) != {"error"}:
        raise AssertionError(f"error response is not {{'error': {{...}}}}: {body!r}")
    code = err.get("code")
    if code not in STATUS:
        raise AssertionError(f"unknown error code {code!r}")
    if not isinstance(err.get("message"), str) or not err["message"]:
        raise AssertionError("error message missing")
    extra = set(err) - {"code", "message", "details"}
    if extra:
        raise AssertionError(f"unexpected error fields {extra}")
    if STATUS[code] != response.status_code:
        raise AssertionError(f"code {code} answered with HTTP {response.status_code}, expected {STATUS[code]}")
    return None
