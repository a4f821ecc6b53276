"""sluice.torch: state and resume. A loader's position is tiny — the epoch,
the batches handed out in it, and the state of the generator the sampler
and the base seed were drawn from at the epoch's start — because every
batch is a function of the sampler's order and the per-sample seeds: a
resumed epoch draws the same order and skips the batches already handed
out (in index space; an iterable dataset's are loaded again and dropped)."""
import torch

FORMAT = "sluice.torch.DataLoader/1"


def position(epoch, batch, rng, fresh, base_seed):
    """The state_dict of an iteration. fresh/base_seed: an epoch of
    persistent workers after their first draws no base seed (as torch's),
    and a resume must not either."""
    return {"format": FORMAT, "epoch": epoch, "batch": batch, "rng": rng,
            "fresh": fresh, "base_seed": base_seed}


def start_of(epoch):
    """The state_dict before an epoch's first batch."""
    return {"format": FORMAT, "epoch": epoch, "batch": 0, "rng": None}


def checked(state):
    """A copy of `state`, or ValueError when it is no state_dict of this loader."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError("state: not a sluice.torch.DataLoader state_dict "
                         "(expected the dict DataLoader.state_dict() returns)")
    return dict(state)


def refuse_unordered():
    raise ValueError("sluice.torch.DataLoader.state_dict: with in_order=False the "
                     "batches are handed out as they arrive, so no position says "
                     "which were; build the loader with in_order=True (the default) "
                     "to checkpoint mid-epoch")


class Resume:
    """What an epoch's start takes from a pending state (None: a plain start)."""

    def __init__(self, state):
        self.state = state
        self.skip = int(state["batch"]) if state is not None else 0
        self._saved_rng = None

    def restore_rng(self, gen):
        """Put the generator the sampler draws from (`gen`, or torch's global
        one) where it was at the saved epoch's start. The caller's global
        state is kept to be put back by put_back_rng once the sampler made
        its first draw."""
        rng = self.state.get("rng") if self.state is not None else None
        if rng is None:
            return
        if gen is not None:
            gen.set_state(rng)
        else:
            self._saved_rng = torch.get_rng_state()
            torch.set_rng_state(rng)

    @property
    def holds_global_rng(self):
        """Whether torch's global generator holds the saved state until
        put_back_rng."""
        return self._saved_rng is not None

    def put_back_rng(self):
        if self._saved_rng is not None:
            torch.set_rng_state(self._saved_rng)
            self._saved_rng = None

    def fresh(self, first):
        """Whether the epoch draws a base seed: a new iterator's first epoch
        does; a resumed one does as the saved epoch did."""
        return first if self.state is None else self.state.get("fresh", True)

    def base_seed(self):
        return int(self.state["base_seed"])
