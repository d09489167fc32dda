"""No RL row without a sampled token (review of session 49's ``rl_rows``): ``max_turns`` running out
right after a user's turn left a row holding only the served prompt of a turn nobody sampled."""

from __future__ import annotations

from test_rl_rows_per_user_turn import NEMO, _PolicyNoTools, _run, _template

from lightning_agents.models import load_tokenizer


def test_no_row_is_laid_out_without_a_sampled_token():
    """``max_turns`` runs out right after a user's turn: the row that turn opened was never sampled and
    holds only its served prompt (nothing to train, a wasted pass); the episode ends with the row before."""
    tok = _template(load_tokenizer("embedded:student"), NEMO)
    _, batch = _run(tok, _PolicyNoTools(split="val", n=1), "per_user_turn", calls=False, max_turns=2)
    assert not batch.rollouts[0]["info"]["finished"]
    assert batch.row_episode == [0, 0]
    assert all(int(batch.out.loss_mask[r].sum()) > 0 for r in range(len(batch.row_episode)))
    assert bool(batch.out.truncated.all())  # the unfinished episode still truncates every row
