"""The orders and refunds functions route with Powertools' HTTP resolver (tally.api.edge.resolver, validation on);
every answer it makes on its own is still the one error shape of docs/errors.md: a parameter it refuses is 400
`invalid_request` naming the field, a path no route matches is 404 `not_found`, an unexpected exception is the
counted, logged 500 (R40), and a TallyError keeps its status and code."""

from __future__ import annotations

import json
from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query
from tally import errors
from tally.api.edge import resolver, to_response
from tally.apigw import json_response
from tally.observability import M, metrics

from tally_local.lambda_io import emf_metrics, http_event
from tally_local.resources import LambdaContext


def app():
    api = resolver(what="toy")

    @api.get("/toys/<name>")
    def toy(name: str, size: Annotated[int, Query()] = 1):
        if name == "boom":
            raise RuntimeError("the table said no")
        if name == "gone":
            raise errors.NotFound("no such toy", code="toy_not_found")
        return to_response(json_response(200, {"name": name, "size": size}))

    return api


def call(api, path, query=None):
    event = http_event("GET", path, b"", {}, {})
    if query:
        event["queryStringParameters"] = query
    answer = api.resolve(event, LambdaContext("ToyFunction"))
    return answer["statusCode"], json.loads(answer["body"])


def test_a_route_answers_its_own_body():
    assert call(app(), "/toys/bear", {"size": "3"}) == (200, {"name": "bear", "size": 3})


def test_a_refused_parameter_is_invalid_request_naming_the_field():
    status, body = call(app(), "/toys/bear", {"size": "big"})
    assert status == 400 and body["error"]["code"] == "invalid_request"
    assert [(e["field"], e["code"]) for e in body["error"]["errors"]] == [("size", "wrong_type")]


def test_no_route_is_not_found_in_the_error_shape():
    status, body = call(app(), "/nothing/here")
    assert status == 404 and body["error"]["code"] == "not_found"


def test_a_tally_error_keeps_its_status_and_code():
    status, body = call(app(), "/toys/gone")
    assert status == 404 and body["error"]["code"] == "toy_not_found"


def test_an_unexpected_exception_is_the_counted_500(capsys):
    metrics.clear_metrics()
    capsys.readouterr()
    status, body = call(app(), "/toys/boom")
    metrics.flush_metrics()
    assert status == 500 and body["error"]["code"] == "internal_error"
    assert dict(emf_metrics(capsys.readouterr().out)) == {M.API_FAILED: 1}
