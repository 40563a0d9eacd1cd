"""Image data: digits, Fashion-MNIST (IDX), CIFAR-10 (pickle batches), ImageNet (ImageFolder; decoded on the
host, on the device or by DALI). May import what `suite.data` may.
"""
