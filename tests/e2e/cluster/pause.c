/* The pod sandbox's process for the real node's containerd (its sandbox_image): it holds the
 * pod's namespaces open and does nothing else. Kubernetes' own pause image is this, but there is
 * no registry to pull it from here, so node.py builds it statically (gcc -static) into an image
 * FROM scratch. As PID 1 of the pod it must exit on SIGTERM and SIGINT itself (the kernel
 * ignores signals PID 1 has no handler for) and reap the zombies that containers sharing its
 * PID namespace leave behind. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction exit_on = {.sa_handler = stop};
  struct sigaction reap_on = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGTERM, &exit_on, NULL);
  sigaction(SIGINT, &exit_on, NULL);
  sigaction(SIGCHLD, &reap_on, NULL);
  for (;;) {
    pause();
  }
  return EXIT_FAILURE;
}
