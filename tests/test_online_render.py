"""The words of a held online loader: its headline (a predicted count, not measured) and the
progress line said the moment it is held."""
from feedprof.render.online import decision_line
from feedprof.render.words import headline
from feedprof.store.codes import InputBound, VerdictKind
from feedprof.store.reasons import Verdict


def test_a_predicted_advice_says_it_was_not_measured():
    v = Verdict(kind=VerdictKind.PREDICTED, input_bound=InputBound.HIGHLY, config={"num_workers": 12})
    words = headline(v, "torch")
    assert "num_workers=12" in words and "not measured" in words and "×" not in words


def test_a_hold_is_said_with_why_and_what_it_would_have_tried():
    line = decision_line({"num_workers": 0}, "held", True, 4.0, "torch", held="rng_loading", predicted_workers=9)
    assert "held at num_workers=0" in line and "draws from" in line
    assert "it would have tried num_workers=9" in line and "--allow-rng-change" in line
    plain = decision_line({"num_workers": 0}, "held", True, 4.0, "torch", held="check_failed")
    assert "no more switching" in plain and "would have tried" not in plain
