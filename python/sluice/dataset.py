"""The chainable dataset builder.

A :class:`Dataset` is an immutable description of a pipeline: every chain
method returns a new Dataset with one more step. The description is the same
JSON spec the ``sluice`` command reads (``source``, ``ops``, ``seed``,
``epochs``, ``on_error``), so a pipeline built here and one run by
``sluice run spec.json`` are the same engine doing the same work.

The engine starts on the first iteration and keeps its threads across epochs.
"""
import atexit
import copy
import json
import os
import weakref

from . import _sluice

__all__ = ["Dataset", "records", "from_arrays", "from_spec"]

# Engines still running at interpreter exit are stopped before Python tears
# down: a worker inside a Python map must not find the interpreter gone.
_live_engines = weakref.WeakSet()


@atexit.register
def _close_all():
    for engine in list(_live_engines):
        engine.close()


def _after_fork_in_child():
    # The engine's threads stay in the parent; a Dataset used in the child
    # starts a fresh engine of its own (see Dataset._get_engine).
    for engine in list(_live_engines):
        engine._after_fork()
    _live_engines.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_column(name, arg="column"):
    if not isinstance(name, str) or not name:
        raise TypeError(f"{arg}: expected a column name (non-empty str), got {name!r}")
    return name


def _check_int(value, arg, minimum=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg}: expected an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{arg}: must be >= {minimum}, got {value}")
    return value


def _check_number(value, arg):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{arg}: expected a number, got {type(value).__name__}")
    return float(value)


def _numbers(value, arg):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    try:
        out = [float(v) for v in value]
    except (TypeError, ValueError):
        raise TypeError(f"{arg}: expected a number or a sequence of numbers, got {value!r}") from None
    if not out:
        raise ValueError(f"{arg}: must not be empty")
    return out


_PY_TYPES = {"int": (int, "an int"), "uint64": (int, "an int"), "number": ((int, float), "a number"),
             "bytes": ((int, str), "an int or a string such as '512M'"), "enum": (str, "a str"),
             "bool": (bool, "a bool")}
_spec_types = None


def _check_type(name, value):
    """TypeError for a Python value of the wrong kind for the spec parameter
    ``name``, its kind read from the engine's table."""
    global _spec_types
    if _spec_types is None:
        _spec_types = {r["name"]: r for r in _sluice.settings() if r["kind"] == "spec"}
    row = _spec_types.get(name)
    if row is None or row["type"] not in _PY_TYPES:
        return
    if isinstance(value, str) and value == "auto" and '"auto"' in row["range"]:
        return
    want, words = _PY_TYPES[row["type"]]
    if not isinstance(value, want) or (isinstance(value, bool) and row["type"] != "bool"):
        raise TypeError(f"{name}: expected {words}, got {type(value).__name__}")


def _engine_check(source=None, **top):
    """The engine's own check of spec parameters: the tables `sluice env`
    lists (``_sluice.settings()``), so a bad value raises its message and
    :class:`sluice.InvalidError` (a ValueError), as from a spec file, and no
    range or default is repeated here (a value of the wrong Python type:
    TypeError, its kind also from the table)."""
    for k, v in top.items():
        _check_type(k, v)
    for k, v in (source or {}).items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                _check_type(f"source.{k}.{kk}", vv)
        else:
            _check_type(f"source.{k}", v)
    spec = {"source": dict(source or {}, path="-")}
    spec.update(top)
    _sluice.check_spec(json.dumps(spec))


def _size2(size, arg="size"):
    """An int (kept: each op gives it torchvision's meaning) or [h, w]."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size <= 0:
            raise ValueError(f"{arg}: must be positive, got {size}")
        return size
    try:
        h, w = size
    except (TypeError, ValueError):
        raise TypeError(f"{arg}: expected an int or (height, width), got {size!r}") from None
    for v in (h, w):
        _check_int(v, arg, 1)
    return [h, w]


def _launcher_rank_world():
    """Rank and world size from torchrun / torch.distributed.launch / SLURM."""
    for rank_var, world_var in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
                                ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_var in os.environ and world_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[world_var])
    return 0, 1


class Dataset:
    """A pipeline description plus, once iterated, the running engine.

    Build one with :func:`records` or :func:`from_spec`; chain methods return
    new Datasets. Iterate with :meth:`numpy` or :meth:`torch` (or plain
    ``iter(ds)``, which is :meth:`numpy`). Each iteration is one epoch (or
    ``repeat(n)`` epochs); :meth:`set_epoch` picks which, as PyTorch's
    ``DistributedSampler.set_epoch`` does. Without set_epoch calls, successive
    iterations run epochs 0, 1, 2, ...
    """

    def __init__(self, spec, callables=None, arrays=None):
        if not isinstance(spec, dict):
            raise TypeError(f"spec: expected a dict, got {type(spec).__name__}")
        self._spec = spec
        self._callables = list(callables or [])
        self._arrays = arrays  # (names, arrays) of an in-memory source, or None
        self._engine = None
        self._epoch = 0
        self._pending_state = None
        self._generation = 0

    # ---- building --------------------------------------------------------

    def _with(self, **changes):
        spec = copy.deepcopy(self._spec)
        for k, v in changes.items():
            spec[k] = v
        return Dataset(spec, self._callables, self._arrays)

    def _with_source(self, **changes):
        spec = copy.deepcopy(self._spec)
        spec.setdefault("source", {}).update(changes)
        return Dataset(spec, self._callables, self._arrays)

    def op(self, name, **params):
        """Append any engine op by its spec name: ``ds.op("resize", column="image",
        size=[256, 256])``. The named methods below are shorthands for this."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"name: expected an op name (str), got {name!r}")
        spec = copy.deepcopy(self._spec)
        step = {"op": name}
        step.update({k: v for k, v in params.items() if v is not None})
        ops = spec.setdefault("ops", [])
        if name != "python":
            # the engine checks the parameters (one home for option lists
            # and ranges); its message names the op as ops[N]
            _sluice.check_op(json.dumps(step), len(ops))
        ops.append(step)
        return Dataset(spec, self._callables, self._arrays)

    def shuffle(self, seed=None, buffer_size=None, mode=None, window=None, block=None):
        """Shuffle records afresh each epoch, keyed by (seed, epoch).

        ``mode="global"``: a pseudo-random permutation of all records (a keyed
        bijection: no table, O(1) memory at any size). ``mode="window"``: blocks of ``block``
        consecutive records are permuted, then positions within each window
        of ``window`` positions (defaults 65,536 and window / 64); no table,
        any position computed directly, ranks read only their own blocks.
        The default (``"auto"``) is global, and window for a remote source of
        more than 16,777,216 records (docs/PIPELINE.md, "Shuffle").
        ``buffer_size`` asks for a
        bounded shuffle buffer instead (streaming sources)."""
        if buffer_size is not None:
            if mode is not None or window is not None or block is not None:
                raise ValueError("buffer_size: a shuffle buffer takes no mode, window or block")
            _check_int(buffer_size, "buffer_size", 1)
            ds = self.op("shuffle_buffer", size=buffer_size)
        elif mode is None and window is None and block is None:
            ds = self._with_source(shuffle=True)
        else:
            how = {"mode": mode if mode is not None else
                   "window" if window is not None or block is not None else "auto"}
            if window is not None:
                how["window"] = window
            if block is not None:
                how["block"] = block
            _engine_check(source={"shuffle": how})
            ds = self._with_source(shuffle=how)
        if seed is not None:
            _engine_check(seed=seed)
            ds._spec["seed"] = seed
        return ds

    def shard(self, rank=None, world_size=None, equal=None):
        """Keep this rank's disjoint slice of every epoch. Without
        arguments, rank and world size come from the launcher's environment
        (torchrun's RANK/WORLD_SIZE, SLURM, Open MPI), else 0 of 1.

        A Dataset without ``shard()`` reads every record, whatever the
        environment says (with a one-line note on stderr when a launcher's
        WORLD_SIZE is above 1). ``equal``: what evens the ranks out when the
        records do not divide — "pad" (the default: each rank gets
        ceil(n / world_size), wrapping to the start, as DistributedSampler),
        "drop" (floor(n / world_size), the tail dropped) or "none" (ranks
        differ by at most one; the union is exactly the data); the spec's
        ``source.shard.equal`` (docs/PIPELINE.md, "Sharding rule")."""
        if rank is None and world_size is None:
            rank, world_size = _launcher_rank_world()
        elif rank is None or world_size is None:
            raise TypeError("shard: give both rank and world_size, or neither")
        shard = {"index": rank, "count": world_size}
        if equal is not None:
            shard["equal"] = equal
        try:
            _engine_check(source={"shard": shard})
        except (TypeError, ValueError) as e:  # name the arguments given, then the spec's key
            raise type(e)(f"shard(rank={rank!r}, world_size={world_size!r}): {e}") from None
        return self._with_source(shard=shard)

    def decode(self, column="image", mode="rgb", warnings="default", exif_orientation=False,
               device="cpu"):
        """Decode JPEG/PNG bytes into an HWC uint8 image (``mode``: "rgb" or
        "gray", as PIL's convert). Fused with a crop/resize that follows.
        ``warnings``: which libjpeg warnings fail the sample — "default"
        (those that mean damaged pixels), "strict" (all, and every corrupt
        Huffman code, which libjpeg-turbo's fast path otherwise reads as
        zero without a warning: docs/OPS.md, "Corrupt entropy data") or
        "lenient" (only a file that ends early, as PIL). ``exif_orientation``: turn JPEGs
        upright by their EXIF orientation (PIL's ImageOps.exif_transpose);
        off by default, as PIL's Image.open. ``device``: "cpu", or "gpu":
        nvJPEG decodes each batch on the GPU, fused with the
        random_resized_crop (or resize + center_crop) that must follow, then
        flip and a float32 normalize (or none: uint8 HWC), into CUDA memory,
        with the CPU chain's dtype and layout; it needs
        ``.device("cuda")``, nvJPEG and sluice's CUDA kernels, and the
        pipeline refuses to start without them, saying which is missing. The
        boxes and flips are the CPU path's for the same seed; images nvJPEG
        refuses (e.g. CMYK) are decoded on the CPU (``stats()["gpu_fallbacks"]``)
        — docs/DEVICE.md."""
        if not isinstance(exif_orientation, bool):
            raise TypeError("exif_orientation: expected a bool, got "
                            f"{type(exif_orientation).__name__}")
        params = {"column": _check_column(column), "mode": mode}
        # only what differs from the defaults, so specs stay as they were
        if warnings != "default":
            params["warnings"] = warnings
        if exif_orientation:
            params["exif_orientation"] = True
        if device != "cpu":
            params["device"] = device
        return self.op("decode", **params)

    def resize(self, column, size, interpolation="bilinear"):
        """torchvision's Resize: an int resizes the shorter side to it
        (keeping the aspect ratio), (height, width) resizes to exactly that.
        ``interpolation``: bilinear|area|nearest, as PIL's filters."""
        return self.op("resize", column=_check_column(column), size=_size2(size),
                       interpolation=interpolation)

    def center_crop(self, column, size):
        """torchvision's CenterCrop (an int is a square; padded with 0 when
        the image is smaller)."""
        return self.op("center_crop", column=_check_column(column), size=_size2(size))

    def random_resized_crop(self, column, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        """torchvision's RandomResizedCrop: a random box of ``scale`` area and
        ``ratio`` aspect, resized to ``size``."""
        scale = _numbers(scale, "scale")
        ratio = _numbers(ratio, "ratio")
        return self.op("random_resized_crop", column=_check_column(column), size=_size2(size),
                       scale=scale, ratio=ratio)

    def flip(self, column="image", p=0.5):
        """Mirror left-right with probability ``p``."""
        p = _check_number(p, "p")
        return self.op("flip", column=_check_column(column), p=p)

    def rotate(self, column, degrees, fill=0):
        """Rotate by a random angle in [-degrees, degrees] (or the range given)."""
        return self.op("rotate", column=_check_column(column), degrees=_numbers(degrees, "degrees"),
                       fill=_check_int(fill, "fill", 0))

    def normalize(self, column="image", mean=(0.0,), std=(1.0,), layout="chw", dtype="float32"):
        """``(x / 255 - mean) / std`` per channel, as torchvision's ToTensor +
        Normalize; ``layout`` chw|hwc, ``dtype`` float32|float16|bfloat16|uint8
        (bfloat16 reaches torch through DLPack; numpy has no bfloat16)."""
        mean = _numbers(mean, "mean")
        std = _numbers(std, "std")
        return self.op("normalize", column=_check_column(column), mean=mean, std=std,
                       layout=layout, dtype=dtype)

    def cast(self, column, dtype):
        """Convert a column's elements to ``dtype`` ('float32', 'int64', ...)."""
        return self.op("cast", column=_check_column(column), dtype=dtype)

    def one_hot(self, column="label", classes=None, dtype="float32"):
        """An integer label as a one-hot vector of ``classes`` values."""
        if classes is None:
            raise TypeError("classes: required (the number of classes)")
        return self.op("one_hot", column=_check_column(column),
                       classes=_check_int(classes, "classes", 1), dtype=dtype)

    def filter(self, column, values=None, exclude=None):
        """Keep samples whose scalar ``column`` is in ``values`` (or, with
        ``exclude``, not in it). On a scalar column of an .slr index this runs
        on the index alone, before any record is read."""
        if (values is None) == (exclude is None):
            raise TypeError("filter: give exactly one of values and exclude")
        key, given = ("in", values) if values is not None else ("not_in", exclude)
        return self.op("filter", column=_check_column(column), **{key: _numbers(given, key)})

    def select(self, *columns):
        """Keep only these columns, in this order."""
        if not columns:
            raise ValueError("columns: give at least one column name")
        return self.op("select", columns=[_check_column(c, "columns") for c in columns])

    def map(self, fn):
        """Apply a Python callable to every sample: ``fn(sample) -> dict``,
        where ``sample`` maps each column name to a numpy array (a copy the
        function may keep or change) and the result maps column names to
        array-likes (columns left out stay as they were; the set of columns
        does not change). Exceptions raised by ``fn`` come out of the
        iteration unchanged.

        The slow path: it runs on the engine's worker threads but holding the
        GIL, so it does not scale with threads, and each column is copied in
        and out. Prefer engine ops. A spec with a Python map cannot be run by
        the ``sluice`` command."""
        if not callable(fn):
            raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
        ds = self._with()
        ds._callables = self._callables + [fn]
        return ds.op("python", id=len(ds._callables) - 1)

    def batch(self, batch_size, drop_remainder=False):
        """Stack ``batch_size`` samples into one batch (a leading dimension)."""
        _check_int(batch_size, "batch_size", 1)
        return self.op("batch", size=batch_size, drop_remainder=bool(drop_remainder))

    def prefetch(self, n=2):
        """Keep up to ``n`` finished batches ready ahead of the consumer."""
        return self.op("prefetch", depth=_check_int(n, "n", 1))

    def repeat(self, count):
        """Go over the data ``count`` times in one iteration (each pass
        draws fresh augmentations)."""
        return self.op("repeat", count=_check_int(count, "count", 1))

    def epochs(self, n):
        """Tell the engine how many epochs you will run, so that it prepares
        epoch e+1 while you finish epoch e. Iteration still stops at the end
        of every epoch."""
        _engine_check(epochs=n)
        return self._with(epochs=n)

    def take(self, n):
        return self.op("take", count=_check_int(n, "n", 0))

    def skip(self, n):
        return self.op("skip", count=_check_int(n, "n", 0))

    def on_error(self, policy):
        """``"fail"`` (default): a bad sample raises, naming file, record and
        op. ``"skip"``: drop it and count it in :meth:`stats`."""
        _engine_check(on_error=policy)
        return self._with(on_error=policy)

    def deterministic(self, flag=True):
        """True (default): batches identical whatever the timing. False:
        parallel stages hand samples on as they finish (faster with uneven
        per-sample cost; order and batch membership vary between runs)."""
        return self._with(deterministic=bool(flag))

    def cache_bytes(self, limit):
        """The budget of the node's shard cache for remote inputs (http://,
        https://, s3://): a number of bytes or a string such as ``"20G"``; 0
        keeps nothing on disk (whole shards are held in memory). Default:
        ``SLUICE_CACHE_BYTES``, else 8G; the cache lives in
        ``SLUICE_CACHE_DIR`` (default ``~/.cache/sluice``). It is one setting
        for the process, taken when the engine starts."""
        _engine_check(cache_bytes=limit)
        return self._with(cache_bytes=limit)

    def memory_limit(self, limit):
        """Bound the memory the pipeline holds: a number of bytes or a
        string such as ``"512M"`` (K, M, G, T are powers of 1024). It covers
        the batch buffers (the batch pool's reserve, prefetched batches and
        those being made); queue depths and the batching stage's workers are
        cut until they fit. Default: a quarter of the memory this process may
        use (physical memory or the cgroup limit, whichever is smaller).
        Creating the engine raises :class:`sluice.LimitError` when one batch
        does not fit."""
        _engine_check(memory_limit=limit)
        return self._with(memory_limit=limit)

    # ---- the spec --------------------------------------------------------

    @property
    def spec(self):
        """The pipeline spec as a dict (a copy)."""
        return copy.deepcopy(self._spec)

    def to_json(self, indent=2):
        """The spec as JSON text, ready for ``sluice run``."""
        if self._arrays is not None:
            raise TypeError("to_json: a Dataset over in-memory arrays has no file to name; "
                            "write them with sluice.Writer to run them from a spec")
        for i, o in enumerate(self._spec.get("ops", [])):
            if o.get("op") == "python":
                k = o.get("id")
                fn = self._callables[k] if isinstance(k, int) and 0 <= k < len(self._callables) \
                    else None
                name = getattr(fn, "__qualname__", None) or "fn"
                raise TypeError(f"to_json: ops[{i}] is a Python .map({name}), which `sluice run` "
                                f"cannot run; write the step with engine ops (ds.op(...), "
                                f"docs/PIPELINE.md), or run this Dataset from Python")
        return json.dumps(self._spec, indent=indent)

    def __repr__(self):
        ops = ", ".join(o.get("op", "?") for o in self._spec.get("ops", []))
        return f"sluice.Dataset({self._spec.get('source', {}).get('path')!r}: {ops})"

    # ---- running ---------------------------------------------------------

    def _get_engine(self):
        if self._engine is not None and self._engine.forked:
            self._engine = None
        if self._engine is None:
            ops = self._spec.get("ops", [])
            if self._arrays is not None or any(o.get("op") == "python" for o in ops):
                # Engine ops go in as JSON, Python maps as callables, in order;
                # the arrays replace the spec's placeholder source path.
                base = dict(self._spec, ops=[])
                steps = [o["id"] if o.get("op") == "python" else json.dumps(o) for o in ops]
                engine = _wrong_reader_check(self._spec, _sluice.Pipeline, json.dumps(base),
                                             steps, self._callables, self._arrays,
                                             self._spec.get("on_error") == "skip")
            else:
                engine = _wrong_reader_check(self._spec, _sluice.Pipeline, json.dumps(self._spec))
            _live_engines.add(engine)
            self._engine = engine
            if self._epoch:
                engine.set_epoch(self._epoch)
        return self._engine

    def set_epoch(self, epoch):
        """The epoch the next iteration runs: it picks the shuffle permutation
        and every random augmentation, so the same (seed, epoch) gives the
        same batches."""
        self._epoch = _check_int(epoch, "epoch", 0)
        self._pending_state = None
        self._generation += 1  # an iteration still open belongs to the old epoch
        if self._engine is not None:
            self._engine.set_epoch(self._epoch)

    def state_dict(self):
        """Where iteration stands: the position after the last batch handed
        out (batches prefetched but not yet handed out do not count). Save it
        with your checkpoint; :meth:`load_state_dict` resumes exactly there."""
        if self._pending_state is not None:
            return copy.deepcopy(self._pending_state)
        return json.loads(self._get_engine().state())

    def load_state_dict(self, state):
        """Resume from a :meth:`state_dict`: the next iteration continues the
        saved epoch from the saved position."""
        if not isinstance(state, dict):
            raise TypeError(f"state: expected a dict from state_dict(), got {type(state).__name__}")
        if "epoch" not in state:
            raise ValueError("state: missing 'epoch' (not a sluice state_dict)")
        self._pending_state = copy.deepcopy(state)
        self._generation += 1

    def explain(self):
        """The plan before and after optimisation (fusions, pushed-down
        filters, stages, workers, queues), as ``sluice explain`` prints it."""
        return self._get_engine().explain()

    def enable_trace(self, max_events=0):
        """Record the engine workers' activity from the next batch on (one
        span per chunk of work per worker; at most ``max_events``, 0 = 1M).
        Call before the first iteration; read it with :meth:`trace`."""
        _check_int(max_events, "max_events", 0)
        self._get_engine().trace_enable(max_events)

    def trace(self, path=None):
        """The recorded trace as Chrome/Perfetto trace-event JSON (open it in
        ui.perfetto.dev): returned as text, or written to ``path``."""
        text = self._get_engine().trace()
        if path is None:
            return text
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return None

    @property
    def columns(self):
        """Names of the columns each batch has."""
        return self._get_engine().columns

    def stats(self):
        """Per-stage throughput, busy and wait times, queue occupancy, error
        counts and the verdict (F: storage bound, P: CPU bound, G: consumer
        bound): the numbers ``sluice bench`` prints, as a dict."""
        return json.loads(self._get_engine().stats())

    def __len__(self):
        """Batches per epoch (per iteration), when the engine can know it
        (not with filters or take)."""
        n = self._get_engine().length()
        if n < 0:
            raise TypeError("len(): the number of batches is not known in advance "
                            "(the pipeline filters samples)")
        return n

    def _start(self):
        engine = self._get_engine()
        if self._pending_state is not None:
            engine.restore(json.dumps(self._pending_state))
            self._epoch = int(self._pending_state["epoch"])
            self._pending_state = None
        else:
            engine.set_epoch(self._epoch)
        self._generation += 1
        return engine, self._generation

    def _finished(self, generation, epoch):
        # An epoch ran to its end: the next iteration (without set_epoch) runs
        # the following one.
        if generation == self._generation and self._epoch == epoch:
            self._epoch = epoch + 1

    def numpy(self):
        """Iterate batches as dicts of numpy arrays sharing the engine's
        memory (no copy). An array stays valid as long as it lives, also
        after the pipeline is gone."""
        return _Loader(self, "numpy")

    def device(self, kind="cuda", id=0, normalize_on_device=False):
        """Deliver batches on a device (spec key ``"device"``): ``"cuda"``
        (GPU ``id``) or ``"host"`` (the same staging ring run by threads,
        batches in CPU memory; for testing without a GPU). Batches are
        staged in pinned memory and copied on a side stream; with
        ``normalize_on_device`` the last :meth:`normalize` runs on the device
        and uint8 crops cross instead of floats. See docs/DEVICE.md."""
        _check_int(id, "id", 0)
        device = {"kind": kind, "id": id, "normalize_on_device": bool(normalize_on_device)}
        _sluice.check_spec(json.dumps({"source": {"path": "-"}, "device": device}))
        return self._with(device=device)

    def torch(self, device=None, non_blocking=False):
        """Iterate batches as dicts of torch tensors made with
        ``torch.from_dlpack`` (no copy).

        With ``device`` (e.g. ``"cuda"`` or ``"cuda:1"``): when the Dataset
        has no :meth:`device` yet and its engine has not started, the device
        path is used if this machine has that CUDA device (pinned staging,
        copies on a side stream, the current torch stream waits on each
        batch's copy). Otherwise each tensor is moved with
        ``.to(device, non_blocking=...)``, after a one-line warning saying
        why the device path is not used (no warning for a non-CUDA device)."""
        if device is not None and "device" not in self._spec and self._engine is None:
            dev = str(device)
            if dev == "cuda" or dev.startswith("cuda:"):
                idx = int(dev.split(":", 1)[1]) if ":" in dev else 0
                why = _sluice.device_available("cuda", idx)
                if why is None:
                    self._spec = dict(self._spec, device={"kind": "cuda", "id": idx,
                                                          "normalize_on_device": False})
                else:
                    import warnings
                    warnings.warn(f"sluice: device path not used ({why}); moving batches "
                                  f"with .to({dev!r})", RuntimeWarning, stacklevel=2)
        return _Loader(self, "torch", device=device, non_blocking=non_blocking)

    def __iter__(self):
        return iter(self.numpy())

    def close(self):
        """Stop the engine's threads now (also done when the Dataset is
        garbage-collected). Arrays already handed out stay valid."""
        if self._engine is not None:
            _live_engines.discard(self._engine)
            self._engine.close()
            self._engine = None


_dlpack_checked = None


def dlpack_for_torch(torch):
    """Export pinned host memory the way the torch in use takes it: as
    DLPack's kDLCUDAHost when torch.from_dlpack accepts a probe capsule of
    that type and reads it as CPU memory with the right values (torch 2.x),
    else as kDLCPU (torch 1.13 refuses kDLCUDAHost). Checked once per
    process, before sluice hands torch its first tensor; returns the type
    chosen (1 or 3)."""
    global _dlpack_checked
    if _dlpack_checked is None:
        code = 1
        try:
            t = torch.utils.dlpack.from_dlpack(_sluice.dlpack_probe(3))
            if t.device.type == "cpu" and t.tolist() == [1, 2, 3, 4]:
                code = 3
        except (RuntimeError, TypeError, ValueError, BufferError):
            pass
        _dlpack_checked = _sluice.dlpack_pinned_device(code)
    return _dlpack_checked


class _Loader:
    """One pass over a Dataset, yielding numpy or torch batches."""

    def __init__(self, ds, kind, device=None, non_blocking=False):
        self._ds = ds
        self._kind = kind
        self._device = device
        self._non_blocking = non_blocking

    def __len__(self):
        return len(self._ds)

    def __iter__(self):
        ds = self._ds
        engine, generation = ds._start()
        epoch = ds._epoch
        if self._kind == "numpy":
            nxt = engine.next_numpy
            convert = None
        else:
            import torch
            dlpack_for_torch(torch)
            nxt = engine.next
            # Host tensors need none of torch.from_dlpack's device and stream
            # checks: take the capsule straight to torch's converter when it is
            # there (half the cost per column). CUDA tensors go through
            # torch.from_dlpack, which passes the current stream to
            # __dlpack__ (the stream then waits on the batch's copy).
            on_cuda = (self._ds._spec.get("device") or {}).get("kind") == "cuda"
            raw = getattr(torch._C, "_from_dlpack", None)
            if raw is not None and not on_cuda:
                def from_dlpack(t):
                    return raw(t.__dlpack__())
            else:
                from_dlpack = torch.from_dlpack
            device, nb = self._device, self._non_blocking

            def to_torch(v):
                if isinstance(v, list):  # a ragged column, or text (a list of str)
                    return [x if isinstance(x, str) else from_dlpack(x) for x in v]
                if isinstance(v, str):   # text without a batch op
                    return v
                return from_dlpack(v)

            if device is None or on_cuda:
                def convert(batch):
                    return {k: to_torch(v) for k, v in batch.items()}
            else:
                def move(v):
                    t = to_torch(v)
                    if isinstance(t, str):
                        return t
                    if isinstance(t, list):
                        return [x if isinstance(x, str) else x.to(device, non_blocking=nb)
                                for x in t]
                    return t.to(device, non_blocking=nb)

                def convert(batch):
                    return {k: move(v) for k, v in batch.items()}
        while True:
            if generation != ds._generation:
                raise RuntimeError("this iteration was superseded: a newer iteration of the "
                                   "same Dataset started, or set_epoch/load_state_dict was "
                                   "called (one pass at a time)")
            batch = nxt()
            if batch is None:
                ds._finished(generation, epoch)
                return
            yield batch if convert is None else convert(batch)


# Each source key of the spec: the call that reads that format, and what it reads.
_READERS = {
    "path": ("records", "a .slr dataset"),
    "image_folder": ("image_folder", "an ImageFolder directory (ROOT/CLASS/IMAGE)"),
    "idx": ("idx", "an IDX (MNIST-style) file"),
    "tfrecord": ("tfrecord", "a TFRecord file"),
    "webdataset": ("webdataset", "a tar shard (WebDataset)"),
    "parquet": ("parquet", "a Parquet file"),
}


def _wrong_reader_check(spec, make, *args):
    """``make(*args)``; when opening the source fails because the input is
    another format than the call that named it reads (records() on an
    ImageFolder, tfrecord() on a .slr), raise InvalidError naming the call
    that reads it instead of the reader's complaint (kept as __cause__)."""
    try:
        return make(*args)
    except _sluice.Error as e:
        src = spec.get("source") or {}
        used = next((k for k in _READERS if k in src), None)
        path = src.get(used) if used else None
        if used == "idx" and isinstance(path, dict):
            path = path.get("images")
        if not isinstance(path, str) or (used == "path" and path == "<memory>"):
            raise
        found = _sluice.detect(path)
        if found is None or found == used:
            raise
        raise _wrong_reader(path, used, found) from e


def _wrong_reader(path, used, found):
    call, what = _READERS[found]
    args_hint = "images, labels" if found == "idx" else repr(path)
    return _sluice.InvalidError(
        f"{path}: {what}, not {_READERS[used][1]}, so sluice.{_READERS[used][0]}() cannot "
        f"read it; use sluice.{call}({args_hint})")


def _check_folder(paths, used):
    """A local folder given to webdataset()/tfrecord(): its files must be
    of that kind (checked now, so a folder of mixed files or of another
    kind fails at the call, naming the call that reads it)."""
    if not isinstance(paths, str) or not os.path.isdir(paths):
        return
    found = _sluice.detect(paths, True)
    if found != used and found in _READERS:
        raise _wrong_reader(paths, used, found)


def _path(p, what):
    try:
        p = os.fspath(p)
    except TypeError:
        raise TypeError(f"{what}: expected a str or os.PathLike, got {type(p).__name__}") from None
    return p if isinstance(p, str) else os.fsdecode(p)


def _paths(paths, what):
    """One path, pattern or @listfile, or a list of them, as the spec wants."""
    if isinstance(paths, (list, tuple)):
        if not paths:
            raise ValueError(f"{what}: no paths given")
        return [_path(p, what) for p in paths]
    return _path(paths, what)


def _source(src, parallel, chunk):
    given = {k: v for k, v in (("parallel", parallel), ("chunk", chunk)) if v is not None}
    _engine_check(source=given)
    src.update(given)
    return Dataset({"source": src, "ops": []})


def synthetic(records, shards=1, bytes=8, parallel=None, chunk=None):
    """A Dataset of ``records`` records computed from their index, nothing
    stored: columns ``index`` (int64 i), ``shard`` (int64, the shard of
    ``shards`` near-equal ones i falls in) and ``payload`` (uint8[bytes], i as
    8 little-endian bytes then hashed filler). For simulating planning and
    sharding at any scale, and for tests."""
    _check_int(records, "records", 1)
    _check_int(shards, "shards", 1)
    _check_int(bytes, "bytes", 8)
    return _source({"synthetic": {"records": records, "shards": shards, "bytes": bytes}},
                   parallel, chunk)


def records(path, parallel=None, chunk=None, max_open_shards=None):
    """A Dataset reading a .slr dataset (file or shard directory) at ``path``.

    ``parallel``: reader threads (an int, or "auto" to let the engine tune
    it; default 1). ``chunk``: records a reader hands on at a time (1-256;
    default adaptive). ``max_open_shards``: a directory's shards open at
    once, least recently used closed first (default: 16, grown while the
    reads keep returning to shards just closed; docs/FORMAT.md, section 9)."""
    src = {"path": _path(path, "path")}
    if max_open_shards is not None:
        _check_int(max_open_shards, "max_open_shards", 1)
        src["max_open_shards"] = max_open_shards
    return _source(src, parallel, chunk)


def tfrecord(paths, features=None, compression=None, index=None, parallel=None, chunk=None,
             max_open_shards=None):
    """A Dataset reading TFRecord files of ``tf.train.Example`` (or
    ``SequenceExample``) records, in the order given.

    ``paths``: a path, a folder of TFRecord files, a brace pattern
    ("train-{00000..00127}.tfrecord"), a shell pattern ("train-*.tfrecord",
    sorted), an "@file" listing paths, or a list of these. ``features``: a dict mapping
    feature keys to column names ({"image/encoded": "image",
    "image/class/label": "label"}) or a list of keys to keep; default every
    feature, named by its key. ``compression``: "gzip", "none" or "auto"
    (default: from the content). ``index``: use FILE.slidx sidecar indexes
    (see ``sluice index``): "auto" (default), True (required) or False.
    ``max_open_shards``: files open at once, least recently used closed
    first (default 64 when any file is remote, else 1024; docs/SOURCES.md,
    "Shards opened lazily")."""
    src = {"tfrecord": _paths(paths, "paths")}
    _check_folder(src["tfrecord"], "tfrecord")
    if features is not None:
        if isinstance(features, dict):
            src["features"] = {str(k): str(v) for k, v in features.items()}
        else:
            src["features"] = {str(k): str(k) for k in features}
    if compression is not None:
        src["compression"] = compression
    if index is not None:
        src["index"] = index
    if max_open_shards is not None:
        _check_int(max_open_shards, "max_open_shards", 1)
        src["max_open_shards"] = max_open_shards
    return _source(src, parallel, chunk)


def webdataset(paths, columns=None, index=None, parallel=None, chunk=None, max_open_shards=None):
    """A Dataset reading WebDataset tar shards: members grouped by key into
    samples, one column per extension (``jpg``, ``cls``, ``json``, ...) plus
    ``__key__``. ``paths``: a path, a folder of tar shards, a brace pattern
    ("shard-{000000..000127}.tar"), a shell pattern ("shard-*.tar",
    sorted), an "@file" listing paths, or a list.
    ``columns``: extensions to keep (default: all). ``index`` and
    ``max_open_shards``: as for :func:`tfrecord`."""
    src = {"webdataset": _paths(paths, "paths")}
    _check_folder(src["webdataset"], "webdataset")
    if columns is not None:
        src["columns"] = [str(c) for c in columns]
    if index is not None:
        src["index"] = index
    if max_open_shards is not None:
        _check_int(max_open_shards, "max_open_shards", 1)
        src["max_open_shards"] = max_open_shards
    return _source(src, parallel, chunk)


def parquet(paths, columns=None, verify=None, cache_bytes=None, parallel=None, chunk=None):
    """A Dataset reading Apache Parquet files (pyarrow's, Hugging Face
    ``datasets``' shards), one record a row, files in the order given.

    ``paths``: a file, a folder of Parquet files, a brace or shell pattern, an
    "@file" listing paths, an ``http(s)://`` or ``s3://`` URL, or a list of
    these. ``columns``: the columns to read, a list of names or a dict
    mapping names to new names; default every column sluice reads (a struct's
    fields as ``struct.field``, a list of numbers as one array column, a
    Hugging Face ``Image``'s bytes as the struct's own name, e.g. ``image``).
    ``verify``: check each page's CRC where the writer stored one (default
    True). ``cache_bytes``: memory for decoded row groups kept for later
    reads (an int, or "512M"; default 512 MiB; counted in the pipeline's
    memory limit). docs/SOURCES.md, "Parquet", says what random access costs."""
    src = {"parquet": _paths(paths, "paths")}
    _check_folder(src["parquet"], "parquet")
    if columns is not None:
        if isinstance(columns, dict):
            src["columns"] = {str(k): str(v) for k, v in columns.items()}
        elif isinstance(columns, str):
            src["columns"] = [columns]
        else:
            src["columns"] = [str(c) for c in columns]
    if verify is not None:
        src["verify"] = bool(verify)
    if cache_bytes is not None:
        if not isinstance(cache_bytes, str):
            _check_int(cache_bytes, "cache_bytes", 0)
        src["cache_bytes"] = cache_bytes
    return _source(src, parallel, chunk)


def image_folder(root, parallel=None, chunk=None):
    """A Dataset reading a torchvision-style ImageFolder in place (no pack
    step): columns ``image`` (the encoded file), ``label`` (the class's
    position among the sorted class directories) and ``path`` (relative to
    ``root``), in torchvision's order."""
    return _source({"image_folder": _path(root, "root")}, parallel, chunk)


def idx(images, labels, parallel=None, chunk=None):
    """A Dataset reading an IDX (MNIST-style) images file and labels file,
    plain or gzip: columns ``image`` (uint8 array) and ``label`` (int64)."""
    return _source({"idx": {"images": _path(images, "images"), "labels": _path(labels, "labels")}},
                   parallel, chunk)


def from_arrays(columns):
    """A Dataset over arrays held in memory, like torch's TensorDataset:
    ``columns`` maps each column name to an array-like whose first dimension
    is the sample count (the same for all); sample i is ``arr[i]`` (a scalar
    for a 1-D array). The data is copied into the engine once, here; after
    that the arrays may change or go."""
    import numpy as np
    if not isinstance(columns, dict) or not columns:
        raise TypeError("columns: expected a non-empty dict of name -> array")
    names, arrays, n = [], [], None
    for name, value in columns.items():
        _check_column(name, "columns")
        arr = np.asarray(value)
        if arr.ndim < 1:
            raise ValueError(f"columns['{name}']: needs a leading sample dimension")
        arr = np.ascontiguousarray(arr)
        if n is None:
            n = arr.shape[0]
        elif arr.shape[0] != n:
            raise ValueError(f"columns['{name}']: {arr.shape[0]} samples, but the first column "
                             f"has {n}")
        names.append(name)
        arrays.append(arr)
    return Dataset({"source": {"path": "<memory>"}, "ops": []}, None, (names, arrays))


_MIX_STOPS = ("never", "first_exhausted", "all_exhausted")
_MIX_SCHEDULES = ("random", "exact")


def mix(datasets, weights=None, *, seed=None, stop="never", schedule="random",
        source_column=None, columns=None):
    """Blend several datasets into one by weight (docs/PYTHON.md, "Mixtures").

    ``datasets``: Datasets made by :func:`records`, :func:`tfrecord`,
    :func:`webdataset`, ... each with its own ``shuffle()`` and its own
    per-sample ops (``.decode()``, ``.resize()``, ``.filter()``, ... — the
    engine's ops; not ``.batch()`` and the other whole-stream ops, nor Python
    functions, which go on the mix), run on its samples before the blend;
    after those ops they must have the same columns (names, dtypes, fixed
    shapes: a mismatch is refused when the pipeline is made, naming both
    inputs and the column). The ops of the mix run on the blend:
    ``sluice.mix([a.decode("jpg").resize("jpg", 64), b.decode("jpg")
    .center_crop("jpg", 200).resize("jpg", 64)], [0.7, 0.3]).batch(256)``.
    ``weights``: one share per input (normalised; default equal), or
    ``{"samples": N}`` per input: N samples of it per epoch (an epoch is
    then their sum). ``schedule``: ``"random"`` draws each position's input
    with the weights, keyed by (seed, epoch, position) as tf.data's
    ``sample_from_datasets``; ``"exact"`` is a deterministic low-discrepancy
    order in which every window of N consecutive samples holds each input's
    share within one. ``stop``: ``"never"`` (an input that runs out starts a
    new pass with a new shuffle: upsampling; an epoch is as long as all
    inputs together, or the sum of the counts), ``"first_exhausted"`` (the
    epoch ends when an input runs out: tf.data's
    ``stop_on_empty_dataset=True``), ``"all_exhausted"`` (an input that runs
    out is left out and the others share its weight, until all have: tf.data's
    default). ``seed`` keys the schedule and every input's shuffle (default:
    the pipeline's seed). ``source_column``: the name of an int64 column
    holding each sample's input index. ``columns``: the columns kept of every
    input (default: all, which must then be the same in every input): what
    a WebDataset's ``__key__`` or an extra feature needs to be left out.
    ``.shard()`` on the mix shards every
    input, then each rank blends its slices; ``stats()["mix"]`` gives the share
    each input got; ``state_dict()`` resumes the blend exactly.
    """
    if isinstance(datasets, Dataset):
        raise TypeError("datasets: expected a list of Datasets, got one Dataset")
    datasets = list(datasets)
    if not datasets:
        raise ValueError("datasets: give at least one Dataset")
    inputs = []
    for i, ds in enumerate(datasets):
        if not isinstance(ds, Dataset):
            raise TypeError(f"datasets[{i}]: expected a Dataset, got {type(ds).__name__}")
        if ds._arrays is not None:
            raise ValueError(f"datasets[{i}]: a mix reads files; from_arrays is not supported "
                             "as its input")
        if ds._callables:
            raise ValueError(f"datasets[{i}]: has a Python function; an input takes the "
                             "engine's per-sample ops only: put the function on the mix")
        src = copy.deepcopy(ds._spec.get("source"))
        if isinstance(src, str):
            src = {"path": src}
        if ds._spec.get("ops"):  # its own per-sample ops (checked by the engine below)
            src["ops"] = copy.deepcopy(ds._spec["ops"])
        inputs.append(src)
    if weights is not None:
        weights = list(weights)
        if len(weights) != len(datasets):
            raise ValueError(f"weights: {len(weights)} given for {len(datasets)} datasets "
                             "(one per dataset)")
        for i, w in enumerate(weights):
            if isinstance(w, dict):
                if set(w) != {"samples"}:
                    raise ValueError(f"weights[{i}]: expected {{\"samples\": N}}, got {w!r}")
                _check_int(w["samples"], f"weights[{i}].samples", 1)
            elif isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0:
                raise ValueError(f"weights[{i}]: expected a number > 0 or {{\"samples\": N}}, "
                                 f"got {w!r}")
    if stop not in _MIX_STOPS:
        raise ValueError(f"stop: expected one of {', '.join(_MIX_STOPS)}, got {stop!r}")
    if schedule not in _MIX_SCHEDULES:
        raise ValueError(f"schedule: expected 'random' or 'exact', got {schedule!r}")
    src = {"kind": "mix", "inputs": inputs, "stop": stop, "schedule": schedule}
    if weights is not None:
        src["weights"] = [dict(w) if isinstance(w, dict) else float(w) for w in weights]
    if seed is not None:
        src["seed"] = _check_int(seed, "seed", 0)
    if source_column is not None:
        src["source_column"] = _check_column(source_column, "source_column")
    if columns is not None:
        if isinstance(columns, str):
            columns = [columns]
        src["columns"] = [_check_column(c, "columns") for c in columns]
    spec = {"source": src, "ops": []}
    _sluice.check_spec(json.dumps(spec))
    return Dataset(spec)


def _check_ops(spec):
    """Each engine op of a spec dict through the engine's check, as
    Dataset.op() does: a misspelt op name or parameter fails here."""
    ops = spec.get("ops", [])
    if not isinstance(ops, list):
        raise _sluice.InvalidError("ops: must be an array of op objects")
    for i, o in enumerate(ops):
        if isinstance(o, dict) and o.get("op") == "python":
            continue
        _sluice.check_op(json.dumps(o), i)


def from_spec(spec):
    """A Dataset from a pipeline spec: a dict, JSON text, or a path to a JSON
    file (the format ``sluice run`` reads). Its ops are checked now, as
    :meth:`Dataset.op` checks them (an unknown op raises InvalidError naming
    the closest known ones). Relative paths in a spec read from a file are
    taken relative to that file's folder, as ``sluice run`` takes them."""
    if isinstance(spec, dict):
        d = copy.deepcopy(spec)
        _check_ops(d)
        return Dataset(d)
    if isinstance(spec, (str, bytes, os.PathLike)):
        text = spec
        where = None
        if isinstance(spec, os.PathLike) or (isinstance(spec, str) and not spec.lstrip().startswith("{")):
            with open(spec, "r", encoding="utf-8") as f:
                text = f.read()
            where = os.fsdecode(os.fspath(spec))
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"spec: not valid JSON: {e}") from None
        if not isinstance(d, dict):
            raise ValueError("spec: the JSON must be an object")
        _check_ops(d)
        if where is not None:
            d = json.loads(_sluice.spec_resolve_paths(json.dumps(d), where))
        return Dataset(d)
    raise TypeError(f"spec: expected a dict, JSON text or a path, got {type(spec).__name__}")
