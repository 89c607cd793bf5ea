/** REST paths of the core objects the daemon and the plugin read and write; names are escaped. */
const seg = encodeURIComponent;

export const namespacePath = (name: string): string => `/api/v1/namespaces/${seg(name)}`;
export const podPath = (namespace: string, name: string): string => `${namespacePath(namespace)}/pods/${seg(name)}`;
export const podStatusPath = (namespace: string, name: string): string => `${podPath(namespace, name)}/status`;
export const eventsPath = (namespace: string): string => `${namespacePath(namespace)}/events`;
export const nodePath = (name: string): string => `/api/v1/nodes/${seg(name)}`;
export const daemonSetPath = (namespace: string, name: string): string =>
  `/apis/apps/v1/namespaces/${seg(namespace)}/daemonsets/${seg(name)}`;
