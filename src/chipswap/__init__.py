"""chipswap: should this model move from GPUs to AWS Inferentia / Trainium, and on which shapes?"""

__version__ = "0.1.0"
