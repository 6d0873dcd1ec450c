"""Networks: backbones (small CNN, ResNets), heads, momentum (EMA) copies, pretrained-weight loading."""
