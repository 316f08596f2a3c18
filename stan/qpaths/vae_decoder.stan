// The generative model of a VAE for binary images, the target of the q-path AIS
// experiment (stanflow.qpaths.vae, workflow qpaths-ais): prior z ~ N(0, I_d), a
// decoder with one tanh hidden layer whose trained weights come in as data, and
// independent Bernoulli pixels,
//   log pi1(z) = std_normal_lpdf(z) + bernoulli_logit_lpmf(x | W2 tanh(W1 z + b1) + b2),
// so that Z = p(x) when evaluated with every constant (propto = false).
data {
  int<lower=1> p;
  int<lower=1> d;
  int<lower=1> h;
  array[p] int<lower=0, upper=1> x;
  matrix[h, d] W1;
  vector[h] b1;
  matrix[p, h] W2;
  vector[p] b2;
}
parameters {
  vector[d] z;
}
model {
  target += std_normal_lpdf(z);
  target += bernoulli_logit_lpmf(x | W2 * tanh(W1 * z + b1) + b2);
}
