// One loss at N (observation, prediction) pairs, for in-process evaluation
// (stanflow.pointwise): the predictions f are the parameters, so one gradient
// gives every observation's derivative, and the Hessian is diagonal:
//   target = -sum_i loss(y[i], f[i], loss_params),
//   d target / d f[i] = -loss'(y[i], f[i]),
// and the transformed parameter `losses` holds each loss(y[i], f[i]).
// Slot: loss.stanfunctions, real loss(real y, real f, vector loss_params).
functions {
  #include loss.stanfunctions
}
data {
  int<lower=0> N;
  vector[N] y;
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
}
parameters {
  vector[N] f;
}
transformed parameters {
  vector[N] losses;
  for (i in 1 : N) {
    losses[i] = loss(y[i], f[i], loss_params);
  }
}
model {
  target += -sum(losses);
}
