/* Library surface for other packages (the lifecycle service): the catalogue and the config shape. The process entry is main.ts. */
export {
  loadCatalogue,
  resolveAgent,
  scriptedAgentPath,
  CATALOGUE_ENV,
  CatalogueFile,
  CatalogueError,
  SettingsFrom,
  homePathParts,
  type AgentSpec,
} from './catalogue.js';
export { AGENTCTL_ENV, AgentctlConfig, loadConfig, ConfigError } from './config.js';
export { AGENTCTL_VERSION } from './version.js';
