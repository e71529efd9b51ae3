"""tools/recipe_search.py's measure of what the public test asks that the training split cannot teach."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import recipe_search  # noqa: E402


def test_limits_counts_unseen_words_on_each_side_and_repeated_english_lines():
    train = [("I am cold.", "J'ai froid."), ("Tom is here.", "Tom est ici.")]
    test = [("I am cold.", "J'ai froid."),          # everything seen
            ("I am COLD!", "J'AI FROID !"),         # case and punctuation do not make a word new
            ("Tom is cold.", "Tom a froid."),       # "a" is a French word no training translation holds
            ("Mary is here.", "Marie est ici."),    # unseen on both sides
            ("Mary is here.", "Marie est là.")]     # the same English again, with another reference
    lim = recipe_search.limits(train, test)
    assert lim == {"test_pairs": 5, "training_pairs": 2, "unseen_english_word": 2, "unseen_french_word": 3,
                   "repeated_english": 2}
