"""The nets (haiku): the reference model, the fast net, the learner."""
