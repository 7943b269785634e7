import torch

def build_model(:
    pass
