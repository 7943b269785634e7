"""What crosses the pipe between the tuner and the worker process: typed records, JSON only at the pipe."""
