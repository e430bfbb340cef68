"""The simulated images routes: real PNGs (decoded by Pillow, a dev dependency the bench
itself never imports), b64_json or url, the content-policy refusal, the multipart reader."""

from __future__ import annotations

import base64
import io
import json

from PIL import Image

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.dispatch import route
from bench.upstream.image_routes import form_parts, image_for, png
from bench.upstream.replies import JsonReply

AUTH = {"authorization": "Bearer k", "content-type": "application/json"}


def _post(path: str, body: dict[str, object]) -> JsonReply:
    reply = route(
        RecordedRequest("POST", path, AUTH, json.dumps(body).encode()), UpstreamBehavior()
    )
    assert isinstance(reply, JsonReply)
    return reply


def test_png_is_a_real_image() -> None:
    with Image.open(io.BytesIO(png((200, 10, 30), side=5))) as image:
        image.load()
        assert image.size == (5, 5) and image.getpixel((2, 2)) == (200, 10, 30)


def test_generations_b64_url_revised_and_refused() -> None:
    reply = _post(
        "/v1/images/generations",
        {"model": "dall-e-3", "prompt": "p", "n": 2, "response_format": "b64_json"},
    )
    data = json.loads(reply.body)["data"]
    assert [base64.b64decode(d["b64_json"]) for d in data] == [image_for("p", 0), image_for("p", 1)]
    assert data[0]["revised_prompt"] == "A detailed rendering of: p"
    urls = json.loads(_post("/v1/images/generations", {"model": "dall-e-2", "prompt": "p"}).body)
    assert urls["data"][0]["url"].startswith("https://images.bench.invalid/")
    assert "revised_prompt" not in urls["data"][0]
    refused = _post("/v1/images/generations", {"model": "dall-e-2", "prompt": "Forbidden"})
    assert refused.status == 400
    assert json.loads(refused.body)["error"]["code"] == "content_policy_violation"


def test_form_parts() -> None:
    body = (
        b'--b\r\nContent-Disposition: form-data; name="n"\r\n\r\n2\r\n'
        b'--b\r\nContent-Disposition: form-data; name="image"; filename="i.png"\r\n'
        b"Content-Type: image/png\r\n\r\n\x89PNG\r\n\r\nx\r\n--b--\r\n"
    )
    request = RecordedRequest(
        "POST", "/", {"content-type": "multipart/form-data; boundary=b"}, body
    )
    assert form_parts(request) == {"n": b"2", "image": b"\x89PNG\r\n\r\nx"}
