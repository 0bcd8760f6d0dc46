"""`chipswap trial`: from a plan's projection to a measurement on one rented Neuron instance, and the fleet
deployment the verdict implies.

Pure core (no I/O): spec (which candidate and layout), launch / benchscript (bash), costing (hours x price),
fleet (Kubernetes objects, SageMaker requests), readme, kit (the folder as text). Shell: write (the folder,
atomically), sagemaker (boto3, with a dry run); the command is chipswap.cli.trial.
"""
