"""A stand-in for a training run's result in tests that fake the training core (its ``to_dict`` is all
the grid runners read)."""


class FakeResult:
    """Holds the record a fake ``train(config)`` returns; ``to_dict`` gives it back."""

    def __init__(self, data):
        self.data = data

    def to_dict(self):
        return self.data
