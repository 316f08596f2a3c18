// One loss at one (y, f) pair, both parameters, for in-process evaluation of
// the loss at any array of pairs, one pair per row (stanflow.pointwise):
//   target = -loss(y, f, loss_params),
// so that the log density of a row is minus the loss and its gradient holds
// minus the derivatives in y and f.
// Slot: loss.stanfunctions, real loss(real y, real f, vector loss_params).
functions {
  #include loss.stanfunctions
}
data {
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
}
parameters {
  real y;
  real f;
}
model {
  target += -loss(y, f, loss_params);
}
