"""`api.kube.error_text`: one readable log line for an API error."""

from kubernetes.client.rest import ApiException

from api.kube import error_text


def test_api_error_is_status_reason_and_server_message() -> None:
    err = ApiException(status=404, reason="Not Found")
    err.body = '{"kind":"Status","message":"pods \\"x\\" not found","code":404}'
    assert error_text(err) == '404 Not Found: pods "x" not found'


def test_body_without_json_and_other_errors() -> None:
    err = ApiException(status=500, reason="Internal Server Error")
    err.body = "<html>oops</html>"
    assert error_text(err) == "500 Internal Server Error"
    assert error_text(ValueError("bad")) == "ValueError: bad"
