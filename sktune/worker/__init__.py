"""The worker process: start-up (load, capture, references), the exactness probe, and trial execution.

It is started and watched by ``tuning/supervisor.py``; it talks to the tuner only through ``pipe/``.
"""
