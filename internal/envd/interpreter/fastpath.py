"""Airlock's direct channel into the kernel's IPython shell (loaded by the
kernel launcher in internal/envd/interpreter/jupyter.go).

The agent writes one JSON request per line to a pipe (fd ``req``); the
kernel's own event loop (the main thread, where ipykernel runs every cell)
wakes on it and runs the cell on the same ZMQInteractiveShell, with the same
formatters, magics, hooks and execution count, but its outputs are written as
JSON lines straight to a second pipe (fd ``rep``) instead of going through
the IOPub thread and four ZeroMQ messages. Under gVisor every thread
hand-off and socket message costs a Sentry round trip; this costs one pipe
read and one pipe write per record.

Request:  {"id": n, "code": str, "silent": bool, "env": {k: v}}
Records:  {"id": n, "t": "count", "n": int}           (execute_input)
          {"id": n, "t": "stream", "name": "stdout"|"stderr", "text": str}
          {"id": n, "t": "display", "data": {...}}    (display_data)
          {"id": n, "t": "result", "data": {...}}     (execute_result)
          {"id": n, "t": "error", "ename", "evalue", "traceback": [str]}
          {"id": n, "t": "fallback"}                  (run it over ZeroMQ)
          {"id": n, "t": "done"}

A cell that needs the kernel's asyncio runner (top-level ``await``) answers
``fallback`` before anything runs, and the agent sends it to ipykernel over
ZeroMQ as before. Nothing here may take the kernel down: a failure in this
module leaves the ZeroMQ path alone.
"""

import json
import os
import select
import signal
import sys
import threading

# A stream record carries at most this many characters, and a cell's stream
# buffer is sent from the writing thread once it holds this much: memory for
# output in flight stays bounded (a cell printing 50 MB must not hold it all
# in the kernel and the agent at once), and a slow reader slows the writer.
STREAM_CHUNK = 256 * 1024


def install(app, req_fd, rep_fd):
    """Serves the channel on app's kernel event loop once the kernel starts."""
    os.set_inheritable(req_fd, False)  # children must not hold the pipes
    os.set_inheritable(rep_fd, False)
    channel = _Channel(app, req_fd, rep_fd)
    kernel = app.kernel
    start = kernel.start

    def start_and_serve(*a, **kw):
        r = start(*a, **kw)
        from tornado.ioloop import IOLoop

        IOLoop.current().add_handler(req_fd, channel.on_readable, IOLoop.READ)
        return r

    kernel.start = start_and_serve


class _Channel:
    def __init__(self, app, req_fd, rep_fd):
        self.app = app
        self.req_fd = req_fd
        self.rep_fd = rep_fd
        self.buf = b""
        self.pending = b""  # deferred records (send), guarded by wlock
        self.wlock = threading.Lock()
        # Serialises taking a stream's buffer with sending it, so chunks
        # flushed by the IOPub thread's timer and by the cell's own thread
        # cannot overtake each other.
        self.slock = threading.RLock()
        self.cur = None  # id of the running cell, None between cells
        # id(stream) -> (cell id, that cell's send_stream) while it runs.
        self.senders = {}
        try:
            from ipykernel.jsonutil import json_clean
        except ImportError:  # pragma: no cover - other ipykernel versions
            json_clean = None
        self.json_clean = json_clean

    # -- transport

    def send(self, rec, defer=False):
        """Writes rec, after the records deferred so far. A deferred record
        waits for the next send (under gVisor each pipe write costs a wake-up
        of the agent, a Sentry round trip: a quick cell's count, result and
        done leave in one write)."""
        try:
            text = json.dumps(rec, default=_json_default, allow_nan=False)
        except ValueError:  # NaN or infinity somewhere: JSON has no such number
            text = json.dumps(_finite(rec), default=_json_default, allow_nan=False)
        b = (text + "\n").encode()
        with self.wlock:
            if defer:
                self.pending += b
                return
            b, self.pending = self.pending + b, b""
            # A write of more than PIPE_BUF bytes may be split, and SIGINT
            # (an interrupt) raising KeyboardInterrupt between the parts
            # would leave half a line in the pipe: hold SIGINT while such a
            # record is written (it is delivered once the record is out).
            # Smaller writes are atomic and skip the two system calls.
            big = len(b) > select.PIPE_BUF
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if big else None
            try:
                while b:
                    n = os.write(self.rep_fd, b)
                    b = b[n:]
            finally:
                if big:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def on_readable(self, fd, events):
        try:
            chunk = os.read(fd, 1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        if not chunk:
            from tornado.ioloop import IOLoop

            IOLoop.current().remove_handler(fd)
            return
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if line.strip():
                self.handle(json.loads(line))

    # -- one cell

    def handle(self, req):
        rid = req["id"]
        code = req.get("code", "")
        silent = bool(req.get("silent"))
        kernel = self.app.kernel
        shell = kernel.shell
        if _needs_async(shell, code):
            self.send({"id": rid, "t": "fallback"})
            return
        env = req.get("env") or {}
        saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        patches = self._patch(rid, shell, silent)
        forward = hasattr(kernel, "_forward_input") and hasattr(kernel, "_restore_input")
        try:
            if hasattr(kernel, "pre_handler_hook"):
                kernel.pre_handler_hook()  # SIGINT raises KeyboardInterrupt in the cell
            if forward:
                kernel._forward_input(False)  # input() raises StdinNotImplementedError
            if not silent:
                kernel.execution_count += 1
                self.send({"id": rid, "t": "count", "n": kernel.execution_count}, defer=True)
            self.cur = rid
            shell.run_cell(code, store_history=not silent, silent=silent)
        except BaseException as e:  # noqa: BLE001 - the loop must go on
            if not silent:
                self.send({"id": rid, "t": "error", "ename": type(e).__name__, "evalue": str(e), "traceback": []})
        finally:
            # Back to ignoring SIGINT first: the agent repeats an interrupt
            # until "done", and one landing here must not cut this short.
            while True:
                try:
                    if hasattr(kernel, "post_handler_hook"):
                        kernel.post_handler_hook()
                    break
                except KeyboardInterrupt:
                    continue
            try:
                self._flush_streams()
            finally:
                self.cur = None
                if forward:
                    kernel._restore_input()
                for undo in reversed(patches):
                    undo()
                try:
                    shell.payload_manager.clear_payload()
                except Exception:  # noqa: BLE001
                    pass
                for k, v in saved_env.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                self.send({"id": rid, "t": "done"})

    def _flush_streams(self):
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:  # noqa: BLE001
                pass

    def _flush_stale(self, stream):
        """A flush that is not the running cell's own: the 0.2 s timer that
        an earlier write armed in the IOPub thread. What the buffer holds now
        was written since the last flush, so it belongs to the cell running
        now, if any; between cells it takes the old path (ZeroMQ)."""
        with self.slock:
            rid, send = self.senders.get(id(stream), (None, None))
            if rid is not None and rid == self.cur:
                send()
            else:
                type(stream)._flush(stream)

    def _route_flush_timers(self, stream):
        """Points the stream's _flush (what ipykernel's write arms its timer
        with, looked up when the IOPub thread arms it) at _flush_stale for
        good: a timer armed by one cell, or armed after its patches were
        undone, may fire while a later cell runs, and ipykernel's own _flush
        would then send that cell's output over ZeroMQ, lost for the client."""
        if getattr(vars(stream).get("_flush"), "_airlock_routed", False):
            return

        def routed(stream=stream):
            self._flush_stale(stream)

        routed._airlock_routed = True
        stream._flush = routed

    def _clean(self, v):
        return self.json_clean(v) if self.json_clean is not None else v

    def _patch(self, rid, shell, silent):
        """Points the shell's output paths at this channel for one cell;
        returns the undo functions."""
        undo = []

        def setattr_(obj, name, value):
            had = name in vars(obj)
            old = vars(obj).get(name)

            def restore():
                if had:
                    setattr(obj, name, old)
                else:
                    try:
                        delattr(obj, name)
                    except AttributeError:
                        pass

            setattr(obj, name, value)
            undo.append(restore)

        # Streams: ipykernel's OutStream keeps buffering (and its fd watcher
        # keeps feeding it); only the send goes here, and flush happens on
        # the calling thread instead of a hand-off to the IOPub thread.
        for stream, name in ((sys.stdout, "stdout"), (sys.stderr, "stderr")):
            if not hasattr(stream, "_flush_buffer"):
                continue

            def send_stream(stream=stream, name=name):
                with self.slock:
                    if self.cur != rid:
                        # An earlier cell's flush timer, or late output.
                        self._flush_stale(stream)
                        return
                    stream._flush_pending = False
                    data = stream._flush_buffer()
                    if not data or silent:
                        return
                    for i in range(0, len(data), STREAM_CHUNK):
                        self.send({"id": rid, "t": "stream", "name": name, "text": data[i:i + STREAM_CHUNK]})

            write = stream.write

            def write_bounded(text, stream=stream, write=write, send_stream=send_stream):
                n = write(text)
                if self.cur == rid and stream._buffer.tell() >= STREAM_CHUNK:
                    send_stream()
                return n

            self._route_flush_timers(stream)
            self.senders[id(stream)] = (rid, send_stream)
            undo.append(lambda stream=stream: self.senders.pop(id(stream), None))
            setattr_(stream, "flush", send_stream)
            if hasattr(stream, "_buffer"):
                setattr_(stream, "write", write_bounded)

        def publish(data, metadata=None, transient=None, update=False, **kw):
            self._flush_streams()
            if silent or update:
                return
            try:
                from ipykernel.zmqshell import encode_images
            except ImportError:  # pragma: no cover
                def encode_images(d):
                    return d
            self.send({"id": rid, "t": "display", "data": self._clean(encode_images(data))})

        setattr_(shell.display_pub, "publish", publish)
        setattr_(shell.display_pub, "clear_output", lambda wait=False: self._flush_streams())

        dh = shell.displayhook

        def finish_displayhook():
            self._flush_streams()
            msg = getattr(dh, "msg", None)
            data = msg["content"]["data"] if msg else None
            if data and not silent:
                # With the default interactivity the result is the cell's
                # last node: only post-execute hooks follow, and it leaves
                # with whatever comes next (at the latest with "done").
                self.send({"id": rid, "t": "result", "data": data},
                          defer=getattr(shell, "ast_node_interactivity", "") in ("last_expr", "none"))
            dh.msg = None

        setattr_(dh, "finish_displayhook", finish_displayhook)

        def showtraceback(etype, evalue, stb):
            self._flush_streams()
            if not silent:
                self.send({"id": rid, "t": "error", "ename": str(etype.__name__), "evalue": str(evalue),
                           "traceback": list(stb or [])})
            shell._last_traceback = stb

        setattr_(shell, "_showtraceback", showtraceback)
        return undo


def _needs_async(shell, code):
    """Whether the cell needs ipykernel's asyncio runner (top-level await)."""
    if "await" not in code and "async" not in code:
        return False
    try:
        try:
            cell = shell.transform_cell(code)
            exc = None
        except Exception:  # noqa: BLE001
            cell, exc = code, sys.exc_info()
        return bool(shell.should_run_async(code, transformed_cell=cell, preprocessing_exc_tuple=exc))
    except Exception:  # noqa: BLE001 - when unsure, let ipykernel run it
        return True


def _finite(o):
    """o with every NaN or infinite float replaced by None."""
    if isinstance(o, float):
        return o if o == o and o not in (float("inf"), float("-inf")) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _json_default(o):
    if isinstance(o, bytes):
        import base64

        return base64.b64encode(o).decode("ascii")
    return str(o)
