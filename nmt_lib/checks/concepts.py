"""Each chapter's concept questions, checked in the notebook. The key holds a hash of
chapter, question and letter for each right answer, not the letter, so that the file
does not give the answers away at a glance; the answers and their reasons are in the
chapter's solutions (the teacher's edition)."""

import hashlib

KEY = {  # chapter -> one hash per multiple-choice question, in order
    "01": ("08018a9aaef2", "44c63fc258ac", "589c26a953b3", "0c7fcc0038ea"),
    "02": ("c2e6cf4df204", "b67c1cd6fe48", "fcb35cfb7af6", "a1a74adf67fe"),
    "03": ("8ce9da4924ee", "d1d3d7613620", "ea8d4886d845", "17789a0be475"),
    "04a": ("c08278677fe5", "a5a4ee8a7d1d", "77612a64d331", "e4b5900da2ec"),
    "04b": ("6869bd6af988", "427efea827e9", "7a326418cecf", "783a9e207f19"),
    "05": ("106c9ed8ac65", "c3a596f306c1", "a91c2ccc7611", "41a6cd16dace"),
    "06": ("88e6540899de", "b9b4bbfb53aa", "d82afd99f121", "7ec963705cbe"),
    "07": ("9efc91508a48", "75da660798a3", "dc6c54954140", "c365e1d604d6"),
    "08": ("9cbee1be3ada", "aca6b9b7df15", "78b9ae04e436", "9aa01e0c1908"),
    "08b": ("143aaa21178b", "3f9394f2bfa8", "d34d07ef2a51", "c22c9c61ad0e"),
    "09": ("550c6d6f1ef6", "9ee5bfd50a91", "e79a7be70a5d", "cd45cd7da683"),
    "10": ("f9f65055dbbd", "8d9fbcb2d06d", "b347de52dd1c", "cf3cea076581"),
    "11": ("08bb06523a7a", "bc765eab0feb", "77ae3acff71d", "a0b1b381024d"),
    "12": ("6d23262e8d96", "2b737fad4d75", "7bdb77fc0b43", "b98cbd230066"),
}


def _hash(chapter: str, number: int, letter: str) -> str:
    return hashlib.sha256(
        f"{chapter}:{number}:{letter.strip().lower()}".encode()
    ).hexdigest()[:12]


def form_problem(letter) -> str | None:
    """Why `letter` is not yet an answer (None when it is one of a to d)."""
    if letter is None:
        return "not answered yet"
    if str(letter).strip().lower() not in ("a", "b", "c", "d"):
        return f"{letter!r} is not one of a, b, c, d"
    return None


def score_concepts(chapter: str, answers: dict) -> int:
    """Print, for each multiple-choice question of `chapter`, whether the letter
    `answers` gives it ({number: "a" to "d"}, None while unanswered) is right; return
    how many are."""
    if chapter not in KEY:
        raise ValueError(
            f"no concept questions for chapter {chapter!r}; chapters with them:"
            f" {', '.join(KEY)}"
        )
    right = 0
    for number, expected in enumerate(KEY[chapter], 1):
        letter = answers.get(number)
        verdict = form_problem(letter)
        if verdict is None and _hash(chapter, number, str(letter)) == expected:
            verdict, right = "right", right + 1
        elif verdict is None:
            verdict = (
                f"{letter} is not it: read the question again, then the section it is"
                " about"
            )
        print(f"question {number}: {verdict}")
    print(f"{right} of {len(KEY[chapter])} right")
    return right


def answers_well_formed(answers: dict, questions: int = 4) -> int:
    """An assignment's concept questions: print, for each, whether `answers` gives it a
    letter a to d, and nothing about whether the letter is right (the teacher's grader
    marks them); return how many do.
    """
    ready = 0
    for number in range(1, questions + 1):
        verdict = form_problem(answers.get(number)) or "answered"
        ready += verdict == "answered"
        print(f"question {number}: {verdict}")
    print(f"{ready} of {questions} answered; your teacher's grader marks them")
    return ready
