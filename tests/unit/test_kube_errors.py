"""`runtime.kubecall.error_text`: one readable log line for an API error."""

from kubernetes.client.rest import ApiException

from runtime.kubecall import error_text


def test_api_error_is_status_reason_and_server_message() -> None:
    err = ApiException(status=404, reason="Not Found")
    err.body = '{"kind":"Status","message":"pods \\"x\\" not found","code":404}'
    assert error_text(err) == '404 Not Found: pods "x" not found'


def test_body_without_json_and_other_errors() -> None:
    err = ApiException(status=500, reason="Internal Server Error")
    err.body = "<html>oops</html>"
    assert error_text(err) == "500 Internal Server Error"
    assert error_text(ValueError("bad")) == "ValueError: bad"


def test_call_retrying_retries_transient_errors_only() -> None:
    import asyncio

    import pytest

    from runtime.kubecall import call_retrying

    attempts: list[int] = []

    def flaky(fail: int, status: int) -> str:
        attempts.append(status)
        if len(attempts) <= fail:
            raise ApiException(status=status, reason="x")
        return "ok"

    assert asyncio.run(call_retrying(flaky, 2, 503)) == "ok"
    assert attempts == [503, 503, 503]
    attempts.clear()
    with pytest.raises(ApiException) as err:
        asyncio.run(call_retrying(flaky, 5, 404))
    assert err.value.status == 404 and attempts == [404], "not transient: no retry"
    attempts.clear()
    with pytest.raises(ApiException):
        asyncio.run(call_retrying(flaky, 100, 429, within=0.5))
    assert 2 <= len(attempts) <= 6, "retried with backoff until the time ran out"
