export const AGENTCTL_VERSION = '0.1.0';
