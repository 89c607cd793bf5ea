/* The sandbox's infra process: holds the pod's namespaces open until told to stop.
 * Built static so the image needs nothing but this one file. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction quit = {0};
  quit.sa_handler = stop;
  sigaction(SIGINT, &quit, NULL);
  sigaction(SIGTERM, &quit, NULL);
  struct sigaction child = {0};
  child.sa_handler = reap;
  child.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &child, NULL);
  for (;;) pause();
  return 1;
}
