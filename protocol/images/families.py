"""Image model families: what a model accepts is decided by its family, told by the upstream
model's name (docs/decisions.md, "Images: model families").

    single-image  dall-e-3 style: n = 1, `style`, `quality` standard or hd, prompt <= 4000
    multi-image   dall-e-2 / gpt-image style: n <= 10, no `style`, quality standard
    diffusion     stable-diffusion / flux style: n <= 10, `negative_prompt`, `seed`,
                  `aspect_ratio`

A name matching none of the patterns is multi-image: the plain OpenAI surface. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

SIZES = ("1024x1024", "1024x1792", "1792x1024", "512x512")
QUALITIES = ("standard", "hd")
STYLES = ("vivid", "natural")
ASPECT_RATIOS = ("1:1", "16:9", "9:16", "4:3", "3:4", "3:2", "2:3", "21:9", "9:21")
SINGLE_PROMPT_CHARS = 4000  # the API's limit for the single-image family
OTHER_PROMPT_CHARS = 32_000  # gpt-image's limit: bounds what is sent upstream


@dataclass(frozen=True)
class Family:
    name: str
    max_n: int
    sizes: tuple[str, ...]
    qualities: tuple[str, ...]
    max_prompt_chars: int
    style: bool = False
    diffusion_params: bool = False  # negative_prompt, seed, aspect_ratio
    edits: bool = True  # POST /v1/images/edits and /variations


SINGLE_IMAGE = Family(
    "single-image",
    max_n=1,
    sizes=("1024x1024", "1024x1792", "1792x1024"),
    qualities=QUALITIES,
    max_prompt_chars=SINGLE_PROMPT_CHARS,
    style=True,
    edits=False,
)
MULTI_IMAGE = Family(
    "multi-image",
    max_n=10,
    sizes=("1024x1024", "512x512"),
    qualities=("standard",),
    max_prompt_chars=OTHER_PROMPT_CHARS,
)
DIFFUSION = Family(
    "diffusion",
    max_n=10,
    sizes=SIZES,
    qualities=QUALITIES,
    max_prompt_chars=OTHER_PROMPT_CHARS,
    diffusion_params=True,
)

_PATTERNS = (
    ("dall-e-3", SINGLE_IMAGE),
    ("dall-e-2", MULTI_IMAGE),
    ("gpt-image", MULTI_IMAGE),
    ("stable-diffusion", DIFFUSION),
    ("sdxl", DIFFUSION),
    ("sd3", DIFFUSION),
    ("flux", DIFFUSION),
)


def family_of(upstream_model: str) -> Family:
    """The family of an upstream model name (case-insensitive substring, first match)."""
    name = upstream_model.lower()
    for pattern, family in _PATTERNS:
        if pattern in name:
            return family
    return MULTI_IMAGE
