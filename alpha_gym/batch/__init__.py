"""Batch scoring of formula pools (`alpha-gym score-batch`): serially or on a Ray cluster, resumable.

    records  reading the input, the output's records and resuming a half-written output
    runner   scoring pending items serially or on Ray workers (one shared Verifier per worker)
    reaper   a watchdog process that takes a local Ray cluster down with its driver, even on kill -9
"""
