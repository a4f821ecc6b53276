"""One rank of the many-ranks check, launched by torchrun (gloo backend):

    torchrun --standalone --nproc_per_node 4 --redirects 0:1,1:1,2:1,3:1 \
        --tee 0:1,1:1,2:1,3:1 tests/remote/torchrun_check.py MODE BASE_URL OUT_DIR

(Debian's torch 1.13 on Python 3.11 needs the explicit --redirects/--tee maps.)

MODE "epochs": for a .slr dataset (BASE_URL/ds) and WebDataset shards
(BASE_URL/wds-{00000..00003}.tar), two epochs with set_epoch; each rank's
sample keys are all-gathered and checked: every epoch the union is the whole
dataset, the ranks are disjoint, and each yields the same number of batches.
It then writes the keys each rank sees in epoch 1 (OUT_DIR/full-RANK.json),
runs epoch 1 again for STOP batches, saves state_dict() and the keys so far
(OUT_DIR/part-RANK.json), and kills itself (SIGKILL): the job dies mid-epoch.

MODE "resume": each rank loads its saved state, finishes epoch 1 and checks
that the keys before the kill plus those after are exactly the keys of the
uninterrupted epoch, in order.
"""
import json
import os
import signal
import sys

import numpy as np
import torch.distributed as dist

import sluice

B = 8
STOP = 3


def keys_of(batch):
    if "idx" in batch:
        return [int(x) for x in np.asarray(batch["idx"])]
    # a text column: str (older builds gave its bytes as uint8 arrays)
    return [k if isinstance(k, str) else bytes(np.asarray(k, dtype=np.uint8)).decode()
            for k in batch["__key__"]]


def make(kind, base):
    if kind == "slr":
        ds = sluice.records(base + "/ds")
    else:
        ds = sluice.webdataset(base + "/wds-{00000..00003}.tar", columns=["cls"])
    return ds.shuffle(seed=0).shard().batch(B)


def main():
    mode, base, out = sys.argv[1:4]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"]) and rank == int(os.environ["RANK"])
    if mode == "epochs":
        for kind in ("slr", "wds"):
            ds = make(kind, base)
            every = None
            for epoch in (0, 1):
                ds.set_epoch(epoch)
                mine, nb = [], 0
                for b in ds:
                    mine += keys_of(b)
                    nb += 1
                got = [None] * world
                dist.all_gather_object(got, (mine, nb))
                allkeys = [k for ks, _ in got for k in ks]
                assert len(allkeys) == len(set(allkeys)), f"{kind} epoch {epoch}: ranks overlap"
                if every is None:
                    every = set(allkeys)
                assert set(allkeys) == every, f"{kind} epoch {epoch}: not the whole dataset"
                assert len({n for _, n in got}) == 1, f"{kind} epoch {epoch}: batch counts {[n for _, n in got]}"
                if rank == 0:
                    print(f"{kind} epoch {epoch}: {len(allkeys)} samples, {got[0][1]} batches a rank, "
                          "disjoint, whole", flush=True)
                if kind == "slr" and epoch == 1:
                    with open(os.path.join(out, f"full-{rank}.json"), "w") as f:
                        json.dump(mine, f)
            if kind == "slr":
                assert every == set(range(240)), "the .slr keys are not 0..239"
            ds.close()
        dist.barrier()
        # the job is killed mid-epoch 1, after STOP batches
        ds = make("slr", base)
        ds.set_epoch(1)
        it = iter(ds)
        before = []
        for _ in range(STOP):
            before += keys_of(next(it))
        with open(os.path.join(out, f"part-{rank}.json"), "w") as f:
            json.dump({"state": ds.state_dict(), "keys": before}, f)
        dist.barrier()
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "resume":
        with open(os.path.join(out, f"part-{rank}.json")) as f:
            part = json.load(f)
        with open(os.path.join(out, f"full-{rank}.json")) as f:
            full = json.load(f)
        ds = make("slr", base)
        ds.load_state_dict(part["state"])
        after = []
        for b in ds:
            after += keys_of(b)
        assert part["keys"] + after == full, f"rank {rank}: resumed epoch differs"
        got = [None] * world
        dist.all_gather_object(got, len(after))
        if rank == 0:
            print(f"resume: every rank finished epoch 1 with exactly its samples ({got} after the kill)",
                  flush=True)
        with open(os.path.join(out, f"ok-{rank}"), "w") as f:
            f.write("ok\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
