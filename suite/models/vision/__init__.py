"""Image classifiers: the CIFAR airbench net, the small CNN, ResNet-50. May import what `suite.models` may.
"""
