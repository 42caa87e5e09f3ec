"""Optional prompt styles from the Cosmos3 Reasoner cookbook (seed 003).

Both are off by default so the seed's benchmark (plain questions, server-default
sampling) is unchanged; the smoke test and the dataset take them as options.
"""

from __future__ import annotations

from typing import Any

# Request-body fields of each sampling preset. `top_k` and `repetition_penalty` are not
# OpenAI parameters; vLLM and Dynamo read them from the body all the same.
SAMPLING_PRESETS: dict[str, dict[str, Any]] = {
    "none": {},
    "no-reasoning": {
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.0,
        "presence_penalty": 1.5,
    },
    "reasoning": {
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
    },
}

# Appended to the question for chain-of-thought answers; the tags are literal output.
REASONING_SUFFIX = (
    "\n\nAnswer the question using the following format:\n\n"
    "<think>\nYour reasoning.\n</think>\n\n"
    "Write your final answer immediately after the </think> tag."
)


def sampling_fields(preset: str) -> dict[str, Any]:
    """Body fields of a preset; a KeyError names the valid ones."""
    try:
        return dict(SAMPLING_PRESETS[preset])
    except KeyError:
        raise KeyError(
            f"unknown sampling preset {preset!r}; choose one of {', '.join(SAMPLING_PRESETS)}"
        ) from None


def question_text(question: str, reasoning_format: bool) -> str:
    """The text part of a request: the question, with the reasoning suffix when asked."""
    return question + REASONING_SUFFIX if reasoning_format else question
