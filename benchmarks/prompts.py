"""What the benchmark asks: the fixed question set and the text stand-in for a video.

The seed sends 20 questions per video, each request [video, question]. The questions are
fixed and varied (appearance, motion, counting, timing...) so answers differ while the
prompt prefix (the video) is shared by all questions about one video.

For a text-only mock model (the local rehearsal) a video is replaced by a deterministic
block of words, distinct per video, placed before the question: the mock's prefix cache
then models the per-video work that session affinity saves. Every stand-in word is one
token for the tiny tokenizer (benchmarks/tiny_model.py), which includes this
vocabulary, so "N tokens" is exact there and close to N for common BPE tokenizers.
"""

from __future__ import annotations

import random

QUESTIONS: tuple[str, ...] = (
    "Describe what happens in this video.",
    "What are the dominant colors in the video?",
    "Which objects move, and in which direction?",
    "How many distinct shapes can you see?",
    "Does the scene change over time? How?",
    "What is in the lower left corner of the frame?",
    "Describe the background of the video.",
    "Is there any text or numbers visible? What do they say?",
    "What happens at the very beginning of the video?",
    "What happens at the end of the video?",
    "Is the camera moving or static?",
    "Summarize the video in one sentence.",
    "What patterns repeat during the video?",
    "Estimate the speed of the moving object.",
    "Which part of the frame changes the most?",
    "Are there any sudden transitions or cuts?",
    "Describe the lighting and contrast of the scene.",
    "What would be a good title for this video?",
    "List three details that a viewer might miss.",
    "Is anything in the video symmetrical? Explain.",
)

# Plain, common English words: one token each in the tiny tokenizer.
STANDIN_WORDS: tuple[str, ...] = tuple(
    """
    red green blue yellow orange purple white black gray brown pink cyan
    circle square line dot stripe wave grid ring arc edge corner center
    left right top bottom middle near far above below inside outside
    moves turns slides spins rises falls grows shrinks fades glows shifts waits
    fast slow steady sudden smooth sharp soft bright dark light heavy thin
    frame scene shot clip view pixel color shape pattern motion speed time
    one two three four five six seven eight nine ten many few
    the a an and or but with from into over under across along behind
    box ball bar cube star arrow panel tile block strip field sky floor wall
    """.split()
)


def standin_text(video_index: int, tokens: int, seed: int = 0) -> str:
    """About `tokens` words standing in for video `video_index`: deterministic, distinct.

    The first words name the video, so two stand-ins differ from their first token and
    share no cached prefix; the rest is drawn from a generator seeded by (seed, index).
    """
    if tokens < 4:
        raise ValueError(f"a text stand-in needs at least 4 tokens (got {tokens})")
    rng = random.Random(f"standin:{seed}:{video_index}")
    head = ["video", str(video_index), "shows", ":"]
    words = [rng.choice(STANDIN_WORDS) for _ in range(tokens - len(head))]
    return " ".join(head + words)
