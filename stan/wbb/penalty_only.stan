// The penalty of a weighted Bayesian bootstrap problem on its own, for
// in-process optimisation (stanflow.wbb.inprocess; docs/wbb.md): the
// coefficients beta are the parameters and
//   target = -penalty(beta, penalty_params),
// so one gradient call gives the penalty's value and its gradient in beta.
// The loss lives in stan/losses/pointwise.stan; the weights, lambda and the
// prior weight are applied in Python, so no data here changes between draws.
// Slot: penalty.stanfunctions, real penalty(vector beta, vector penalty_params)
//       (smooth; stan/wbb/penalties), the slot of stan/wbb/weighted_glm.stan.
functions {
  #include penalty.stanfunctions
}
data {
  int<lower=1> K;
  int<lower=0> n_penalty_params;
  vector[n_penalty_params] penalty_params;
}
parameters {
  vector[K] beta;
}
model {
  target += -penalty(beta, penalty_params);
}
