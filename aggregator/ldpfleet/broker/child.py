"""A subprocess this program started and owns (a private mosquitto, `serve` under the demo):
signalled by its PID only, never by name, so it cannot touch anyone else's process."""
import os
import signal
import subprocess


class ChildProcess:
    """`proc` is the Popen (None before start); `log_path` its log file, if any."""

    proc = None
    log_path = None
    LOG_TAIL = 6000

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL by PID (a crash)."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 30.0, sig=signal.SIGTERM):
        """`sig` (SIGTERM: a clean shutdown) by PID, wait; SIGKILL if it does not exit.
        Returns the exit code (None if it never started)."""
        if self.alive():
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return None if self.proc is None else self.proc.returncode

    def log(self) -> str:
        """The tail of its log ("" when there is none)."""
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - self.LOG_TAIL))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
