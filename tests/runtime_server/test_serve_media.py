"""`vllm-srun serve` on a media-capable tiny preset, as the official clients reach it: the SDK's
multipart image, a video inline through `extra_body`, and jevcompat's conformance run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typesafe_sdk import Box, Choice, Image, Noul, TypeSafeClient

from sr_runtime.presets import create
from tests.media.files import asset, image, video

from .conftest import vllm_srun_serve
from .test_serve import assert_conformant


@pytest.mark.slow
def test_the_sdk_sends_an_image_as_a_multipart_asset_and_jevcompat_stays_conformant(tmp_path: Path) -> None:
    folder = create(tmp_path / "tiny-vision-heads", "hybrid-vision-heads", seed=0)
    with vllm_srun_serve(str(folder), "--device", "cpu") as server:
        assert_conformant(server.url)
        with TypeSafeClient(api_key="not-checked", base_url=server.url) as client:
            photo = client.system_one(
                state=Image(image(1)),
                questions={
                    "dog": Noul(instructions="Is there a dog in the photo?"),
                    "scene": Choice(instructions="Where is this?", criteria={"indoors": None, "outdoors": None}),
                    "where": Box(instructions="the dog"),
                },
            )
            assert 0 <= photo.nouls["dog"].noul <= 1 and photo.choices["scene"].choice in ("indoors", "outdoors")
            edges = photo.boxes["where"].box
            assert 0 <= edges.top <= edges.bottom <= 1 and 0 <= edges.left <= edges.right <= 1
            other = client.system_one(
                state=Image(image(7)), questions={"dog": Noul(instructions="Is there a dog in the photo?")}
            )
            assert other.nouls["dog"].noul != photo.nouls["dog"].noul  # the image is read
            # SDK 0.7.5's Asset type knows only images: a video goes inline through extra_body.
            clip = client.system_one(
                state="⟦vid-1⟧ What happens in the video?",
                questions={"dog": Noul(instructions="Does a dog run?")},
                extra_body={"assets": {"⟦vid-1⟧": asset(video(2), "video", "mp4")}},
            )
            assert 0 <= clip.nouls["dog"].noul <= 1
