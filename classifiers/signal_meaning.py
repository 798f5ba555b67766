"""What a fatal signal means for a job: one row per signal, read by both kinds of evidence.

The log rules (`rules.py`: `Bus error`, `Segmentation fault`) and the scheduler facts
(`scheduler_facts.py`: Slurm's signal 7, exit code 135) take their cause and hint from here, so the
same death says the same thing to the operator whichever of them saw it. Each keeps its own
priority: a line the job printed and a number the scheduler recorded weigh differently.
Meanings are Linux's (signal(7), mmap(2)); exit status 128+N is a shell's report of signal N (bash(1)).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from pitstop.models import Cause


class SignalMeaning(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str  # lower-case signal name, the signature's stem (sigsegv, signal-11-sigsegv)
    cause: Cause  # what it stands for when nothing printed with it names more
    hint: str


SIGNALS: dict[int, SignalMeaning] = {
    11: SignalMeaning(name="sigsegv", cause=Cause.CRASH_SIGNAL,
                      hint="the process segfaulted: collect the core dump/faulthandler trace; suspect native extensions"),
    6: SignalMeaning(name="sigabrt", cause=Cause.CRASH_SIGNAL,
                     hint="the process aborted: look for the assert/terminate message before it"),
    # A page of a mapping the kernel could not back (mmap(2), signal(7)): in a training or MPI job
    # nearly always a full /dev/shm (Docker's 64 MB default, a pod's shm limit), so host memory.
    7: SignalMeaning(name="sigbus", cause=Cause.HOST_OOM,
                     hint="bus error: a shared-memory page could not be backed, most often /dev/shm full (give the "
                          "container --shm-size or --ipc=host, the pod a larger memory-backed /dev/shm); else a "
                          "truncated mmap'd file"),
    # The CPU refused an instruction: a binary built for a newer CPU (AVX2, AVX-512) than the node's.
    4: SignalMeaning(name="sigill", cause=Cause.ENVIRONMENT,
                     hint="illegal instruction: the binary was built for another CPU (AVX2/AVX-512): rebuild for the "
                          "node's CPU or constrain the job to nodes that have the instructions (sbatch --constraint)"),
    8: SignalMeaning(name="sigfpe", cause=Cause.CRASH_SIGNAL, hint="arithmetic exception in native code"),
    # A bare SIGKILL stays a crash: the OOM killer, the scheduler and an admin all send it.
    9: SignalMeaning(name="sigkill", cause=Cause.CRASH_SIGNAL,
                     hint="the process was SIGKILLed (OOM killer, scheduler or admin): check dmesg and sacct"),
    15: SignalMeaning(name="sigterm", cause=Cause.CRASH_SIGNAL,
                      hint="SIGTERM: usually a cancel, preemption or time limit"),
}
